//! Folded stacks (Brendan Gregg's FlameGraph input) and the SVG flame graph
//! inferno draws from them, each made in pieces as it is sent.
use std::collections::HashMap;

use super::pieces::PieceWriter;
use super::ExportError;
use crate::api::Mode;
use crate::kernel::KERNEL;
use crate::model::{is_time, FunctionInfo, ResolvedProfile};

/// A frame's name with flamegraph.pl's annotations, which its `java`, `js`
/// and `perl` palettes colour by: `name_[k]` for kernel code, `name_[i]`
/// for an inlined function, else `name`.
fn annotated(f: &FunctionInfo) -> String {
    if f.module == KERNEL {
        format!("{}_[k]", f.name)
    } else if f.inlined {
        format!("{}_[i]", f.name)
    } else {
        f.name.clone()
    }
}

/// A frame name safe in a folded line: `;` separates frames and the line
/// ends in ` count`, so `;` and line breaks become `:` and spaces.
pub(super) fn clean(name: String) -> String {
    if name.contains([';', '\n', '\r']) {
        name.replace(';', ":").replace(['\n', '\r'], " ")
    } else {
        name
    }
}

/// Folded stacks: one `outer;...;inner count` line per distinct stack
/// (threads merged; frames named `name`, `name_[k]` for kernel code or
/// `name_[i]` for an inlined function, as flamegraph.pl expects), lines
/// sorted, each ending in `\n`. Empty stacks are left out. The count is the
/// profile's: samples, or for off-CPU and wall-clock profiles an integer
/// number of nanoseconds (the `[off-cpu: …]` frames of waits outermost).
pub fn folded(p: &ResolvedProfile) -> String {
    let mut out = String::new();
    folded_pieces(p, usize::MAX, |piece| {
        out = piece;
        true
    });
    out
}

/// The text of a folded line's path (names by function id), a byte at a
/// time.
pub(super) fn line_text<'a>(names: &'a [String], path: &'a [u32]) -> impl Iterator<Item = u8> + 'a {
    text_from(names, path, 0)
}

/// The text of a folded line's path from its frame `from` on (with the
/// `;` before it), a byte at a time.
fn text_from<'a>(
    names: &'a [String],
    path: &'a [u32],
    from: usize,
) -> impl Iterator<Item = u8> + 'a {
    path.iter().enumerate().skip(from).flat_map(move |(i, &f)| {
        let name = names.get(f as usize).map_or("[unknown]", String::as_str);
        (if i == 0 { "" } else { ";" }).bytes().chain(name.bytes())
    })
}

/// Two paths' texts from the first frame where their functions differ
/// (the text before it is the same): what their order depends on.
pub(super) fn texts_apart<'a>(
    names: &'a [String],
    a: &'a [u32],
    b: &'a [u32],
) -> (impl Iterator<Item = u8> + 'a, impl Iterator<Item = u8> + 'a) {
    let same = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    (text_from(names, a, same), text_from(names, b, same))
}

/// [`folded`] made and handed to `each` in pieces of whole lines, each
/// piece `piece_bytes` long or a little longer (a line more), so that the
/// whole text is never held: only each distinct path of function ids. The
/// pieces concatenated are [`folded`]. `each` returns false to stop.
pub fn folded_pieces(
    p: &ResolvedProfile,
    piece_bytes: usize,
    mut each: impl FnMut(String) -> bool,
) {
    let names: Vec<String> = p.functions.iter().map(|f| clean(annotated(f))).collect();
    let lines = merged_lines(p, &names);
    let mut out = String::new();
    for (path, count) in &lines {
        push_line(&mut out, &names, path, *count);
        if out.len() >= piece_bytes && !each(std::mem::take(&mut out)) {
            return;
        }
    }
    if !out.is_empty() || piece_bytes == usize::MAX {
        each(out);
    }
}

/// The folded lines of `p` with frames named by `names` (by function id),
/// sorted by their text: each a path of function ids (outermost first) and
/// its count, paths of other functions with the same names merged into one.
pub(super) fn merged_lines(p: &ResolvedProfile, names: &[String]) -> Vec<(Box<[u32]>, u64)> {
    // The distinct paths (outermost first), each held once, exactly sized.
    let mut counts: HashMap<Box<[u32]>, u64> = HashMap::new();
    let mut path = Vec::new();
    for s in p
        .stacks
        .iter()
        .filter(|s| !s.frames.is_empty() && s.count > 0)
    {
        path.clear();
        path.extend(s.frames.iter().rev().map(|f| f.function));
        match counts.get_mut(&path[..]) {
            Some(c) => *c += s.count,
            None => {
                counts.insert(path.as_slice().into(), s.count);
            }
        }
    }
    let mut lines: Vec<(Box<[u32]>, u64)> = counts.into_iter().collect();
    // In the order of the lines' text, without making it.
    lines.sort_unstable_by(|a, b| {
        let (a, b) = texts_apart(names, &a.0, &b.0);
        a.cmp(b)
    });
    // Paths of other functions with the same names are one line.
    lines.dedup_by(|next, kept| {
        let same = {
            let (a, b) = texts_apart(names, &next.0, &kept.0);
            a.eq(b)
        };
        if same {
            kept.1 += next.1;
        }
        same
    });
    lines
}

/// Appends the folded line of `path` with `count` to `out`.
pub(super) fn push_line(out: &mut String, names: &[String], path: &[u32], count: u64) {
    for (k, &f) in path.iter().enumerate() {
        if k > 0 {
            out.push(';');
        }
        out.push_str(names.get(f as usize).map_or("[unknown]", String::as_str));
    }
    out.push(' ');
    out.push_str(&count.to_string());
    out.push('\n');
}

/// The folded text of `lines` with frames named by `names`, exactly sized.
pub(super) fn text_of(names: &[String], lines: &[(Box<[u32]>, u64)]) -> String {
    let size = lines
        .iter()
        .map(|(path, count)| line_text(names, path).count() + 2 + count.to_string().len())
        .sum();
    let mut out = String::with_capacity(size);
    for (path, count) in lines {
        push_line(&mut out, names, path, *count);
    }
    out
}

/// An SVG flame graph of the folded stacks (inferno), titled `title`. A
/// profile without samples gives inferno's picture saying so. Frames are
/// named as in viewers (`name [inlined]`: inferno would hide the folded
/// annotations). Frames count
/// `samples`, or for off-CPU and wall-clock profiles `ns`, with a subtitle
/// saying which time. Frames narrower than 0.01 % of the total are left
/// out, as inferno leaves them out.
pub fn svg(p: &ResolvedProfile, title: &str) -> Result<Vec<u8>, ExportError> {
    let mut out = Vec::new();
    svg_pieces(p, title, usize::MAX, |piece| {
        out = piece;
        true
    })?;
    Ok(out)
}

/// [`svg`] handed to `each` in pieces of `piece_bytes` (the last one
/// shorter) as inferno draws it: the picture is never whole. inferno
/// takes the folded lines whole (it sorts them and its frames borrow their
/// names), so it is given only the lines of what it draws: stacks cut
/// below the frames it leaves out as too narrow (see the `drawn` module),
/// the picture unchanged. Held: the merged stacks' paths, those lines and
/// inferno's frames for them. The pieces concatenated are [`svg`]. `each`
/// returns false to stop.
pub fn svg_pieces(
    p: &ResolvedProfile,
    title: &str,
    piece_bytes: usize,
    each: impl FnMut(Vec<u8>) -> bool,
) -> Result<(), ExportError> {
    let mut opt = svg_options(p, title);
    let text = super::drawn::drawn_text(p, opt.min_width, super::drawn::MARGIN);
    draw(&mut opt, &text, piece_bytes, each)
}

/// The folded lines [`svg`] draws `p`'s flame graph from (frames named as
/// in viewers): every stack cut below the frames inferno leaves out as
/// narrower than 0.01 % of the total.
pub fn svg_text(p: &ResolvedProfile) -> String {
    let min_width = svg_options(p, "").min_width;
    super::drawn::drawn_text(p, min_width, super::drawn::MARGIN)
}

/// inferno's options for the flame graph of `p` titled `title`.
pub(super) fn svg_options(
    p: &ResolvedProfile,
    title: &str,
) -> inferno::flamegraph::Options<'static> {
    let mut opt = inferno::flamegraph::Options::default();
    // Colours by the function's name, not at random: one profile gives one
    // picture, and a function has its colour in every picture.
    opt.hash = true;
    opt.title = title.to_string();
    opt.count_name = if is_time(p.mode) { "ns" } else { "samples" }.to_string();
    opt.subtitle = match p.mode {
        Mode::OffCpu => Some("off-CPU time (ns)".to_string()),
        Mode::Wall => Some("wall-clock time, on- and off-CPU (ns)".to_string()),
        Mode::Cpu | Mode::Unspecified => None,
    };
    opt
}

/// inferno's picture of the folded `text` with `opt`, handed to `each` in
/// pieces of `piece_bytes`.
pub(super) fn draw(
    opt: &mut inferno::flamegraph::Options<'_>,
    text: &str,
    piece_bytes: usize,
    each: impl FnMut(Vec<u8>) -> bool,
) -> Result<(), ExportError> {
    let mut out = PieceWriter::new(piece_bytes, each);
    match inferno::flamegraph::from_lines(opt, text.lines(), &mut out) {
        Ok(()) => {}
        // The reader is gone: nothing more to make.
        Err(_) if out.stopped() => return Ok(()),
        // No stack counts: inferno has drawn its message and ends the SVG.
        Err(_) if text.is_empty() && out.written() > 0 => {}
        Err(e) => return Err(ExportError::FlameGraph(e)),
    }
    out.finish();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::known;

    #[test]
    fn one_profile_gives_one_picture() {
        let (a, b) = (svg(&known(), "t").unwrap(), svg(&known(), "t").unwrap());
        assert!(a == b, "two flame graphs of one profile differ");
    }

    #[test]
    fn svg_pieces_make_the_picture() {
        let whole = svg(&known(), "t").unwrap();
        for size in [1, 1000, 1 << 20] {
            let mut pieces = Vec::new();
            svg_pieces(&known(), "t", size, |piece| {
                pieces.push(piece);
                true
            })
            .unwrap();
            let (last, rest) = pieces.split_last().unwrap();
            assert!(rest.iter().all(|p| p.len() == size) && last.len() <= size);
            assert!(pieces.concat() == whole, "pieces of {size} bytes");
        }
        // Stopped after the first piece, quietly.
        let mut n = 0;
        svg_pieces(&known(), "t", 100, |_| {
            n += 1;
            false
        })
        .unwrap();
        assert_eq!(n, 1);
    }

    #[test]
    fn folded_text() {
        assert_eq!(
            folded(&known()),
            "main;a 1\nmain;a;c 3\nmain;b;c 2\nmain;b;inl_[i] 2\nmain;r;r;r 4\n"
        );
    }

    #[test]
    fn folded_pieces_are_whole_lines_that_make_the_text() {
        let mut p = known();
        // Another function of the same name (another module): its stacks
        // are the same lines.
        let mut other = p.functions[p.stacks[0].frames[0].function as usize].clone();
        other.module = "other.so".into();
        p.functions.push(other);
        let mut s = p.stacks[0].clone();
        s.frames[0].function = p.functions.len() as u32 - 1;
        s.count = 10;
        p.stacks.push(s);
        let text = folded(&p);
        assert_eq!(text.lines().count(), 5, "{text}");
        for size in [1, 7, 20, 1 << 20] {
            let mut pieces = Vec::new();
            folded_pieces(&p, size, |piece| {
                pieces.push(piece);
                true
            });
            assert!(pieces.iter().all(|l| l.ends_with('\n')), "{pieces:?}");
            assert!(pieces.iter().all(|l| l.len() < size + 30), "{pieces:?}");
            assert_eq!(pieces.concat(), text, "pieces of {size} bytes");
        }
        // Stopped after the first piece.
        let mut n = 0;
        folded_pieces(&p, 1, |_| {
            n += 1;
            false
        });
        assert_eq!(n, 1);
    }

    #[test]
    fn folded_merges_threads_and_cleans_names() {
        let mut p = known();
        // The same stack on another thread merges into one line.
        let mut s = p.stacks[2].clone();
        s.tid = 99;
        s.count = 5;
        p.stacks.push(s);
        p.functions[1].name = "a;x".into();
        let text = folded(&p);
        assert!(text.starts_with("main;a:x 6\nmain;a:x;c 3\n"), "{text}");
        assert_eq!(folded(&ResolvedProfile::default()), "");
    }

    #[test]
    fn kernel_frames_end_in_k() {
        let mut p = known();
        p.functions[3].module = KERNEL.into();
        let text = folded(&p);
        assert!(text.contains("main;a;c_[k] 3\n"), "{text}");
        assert!(text.contains("main;b;inl_[i] 2\n"), "{text}");
        assert!(!text.contains("main;a;c 3"), "{text}");
    }

    #[test]
    fn svg_has_the_functions() {
        let svg = String::from_utf8(svg(&known(), "prog (pid 1234)").unwrap()).unwrap();
        assert!(
            svg.starts_with("<?xml") || svg.starts_with("<svg"),
            "{}",
            &svg[..50]
        );
        assert!(svg.trim_end().ends_with("</svg>"));
        for name in ["main", "inl [inlined]", "prog (pid 1234)"] {
            assert!(svg.contains(name), "{name} missing");
        }
    }

    #[test]
    fn off_cpu_values_are_nanoseconds() {
        let p = crate::testdata::off_cpu();
        let text = folded(&p);
        assert!(
            text.starts_with("[off-cpu: blocked];main;a 1000000\n"),
            "{text}"
        );
        let sum: u64 = text
            .lines()
            .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
            .sum();
        assert_eq!(sum, 12_000_000);
        let svg = String::from_utf8(svg(&p, "prog").unwrap()).unwrap();
        assert!(svg.contains("off-CPU time (ns)"), "no subtitle");
        assert!(svg.contains(" ns, "), "frames count ns");
        assert!(!svg.contains(" samples, "), "frames count ns");
    }

    #[test]
    fn svg_of_nothing_is_still_svg() {
        let svg = String::from_utf8(svg(&ResolvedProfile::default(), "empty").unwrap()).unwrap();
        assert!(svg.contains("<svg") && svg.trim_end().ends_with("</svg>"));
    }
}
