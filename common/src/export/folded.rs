//! Folded stacks (Brendan Gregg's FlameGraph input), made in pieces as
//! they are sent, and the merged lines the SVG flame graph is drawn from.
use std::collections::HashMap;

use crate::kernel::is_kernel_module;
use crate::model::{FunctionInfo, ResolvedProfile};

/// A frame's name with flamegraph.pl's annotations, which its `java`, `js`
/// and `perl` palettes colour by: `name_[k]` for kernel code, `name_[i]`
/// for an inlined function, else `name`.
fn annotated(f: &FunctionInfo) -> String {
    if is_kernel_module(&f.module) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::known;

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
        p.functions[3].module = crate::kernel::KERNEL.into();
        let text = folded(&p);
        assert!(text.contains("main;a;c_[k] 3\n"), "{text}");
        assert!(text.contains("main;b;inl_[i] 2\n"), "{text}");
        assert!(!text.contains("main;a;c 3"), "{text}");
        // A loadable module's function too; a module named like one is not.
        p.functions[3].module = crate::kernel::module_of("xfs");
        assert!(folded(&p).contains("main;a;c_[k] 3\n"));
        p.functions[3].module = "[kernel.xfs".into();
        assert!(folded(&p).contains("main;a;c 3\n"));
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
    }
}
