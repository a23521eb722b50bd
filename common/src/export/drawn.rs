//! SVG flame graphs (inferno), and the folded lines they are drawn from,
//! cut to what inferno draws: inferno leaves out every frame narrower than its `min_width`
//! (a share of the total), so stacks are cut below such frames before it
//! sees them, and it holds only the frames it draws. The picture is the
//! one inferno draws of the whole folded text, byte for byte.
//!
//! inferno sorts the lines by their text (count included) and draws a
//! frame for each run of consecutive lines with the same frames down to
//! it; a frame's width is the sum of its run's counts. Cut here, in that
//! order: a run narrower than the cut, with the narrow runs after it
//! under the same parent as long as their sum stays narrower (and the
//! line after them is not of the first run's frame), becomes one line:
//! the first of them cut at the run's frame (a frame below it when that
//! frame's name begins another name, so that the line sorts in the same
//! place), with their counts' sum. Frames and runs of the whole text at
//! and above the cut stay as they were (same place, width and order);
//! what is new is narrower than the cut, so inferno leaves it out.
use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};

use super::folded::{clean, merged_lines, push_line, text_of, texts_apart};
use super::pieces::PieceWriter;
use super::{frame_name, ExportError};
use crate::api::Mode;
use crate::model::{is_time, ResolvedProfile};

/// The cut's share of inferno's least width: frames under half of it
/// are cut, so that no frame inferno draws is ever cut (a frame between
/// half and all of it is kept and left out by inferno).
pub(super) const MARGIN: f64 = 0.5;

/// The folded text (frames named as in viewers) inferno draws `p`'s
/// flame graph from with `min_width` (inferno's option: a percentage of
/// the total), stacks cut below the frames narrower than `margin` times
/// that width. The whole text when a name could change how inferno reads
/// a line (see [`plain`]) or the cut lines would not keep inferno's order.
pub(super) fn drawn_text(p: &ResolvedProfile, min_width: f64, margin: f64) -> String {
    let names: Vec<String> = p.functions.iter().map(|f| clean(frame_name(f))).collect();
    let mut lines = merged_lines(p, &names);
    if lines.is_empty() || !names.iter().all(|n| plain(n)) {
        return text_of(&names, &lines);
    }
    // inferno's order: the lines' text with their counts.
    lines.sort_unstable_by(|a, b| line_order(&names, a, b));
    let total: u64 = lines.iter().map(|l| l.1).sum();
    // inferno's least width, in counts, as inferno computes it.
    let widthpertime_pct = 100.0 / total as f64;
    let cut = margin * (min_width / widthpertime_pct);
    let text = cut_text(&names, &lines, cut);
    let mut kept = text.lines();
    let mut last = kept.next();
    for line in kept {
        if last.is_some_and(|l| l >= line) {
            return text_of(&names, &lines);
        }
        last = Some(line);
    }
    text
}

/// Whether inferno reads a line ending in the name `name` as it is
/// written: not empty, no space at either end (inferno trims lines),
/// not a comment (`# `), and not ending in what would read as a second
/// count (` 12`, ` 1.5`).
fn plain(name: &str) -> bool {
    !name.is_empty()
        && name.trim() == name
        && !name.starts_with('#')
        && name
            .rsplit_once(' ')
            .is_none_or(|(_, last)| !last.bytes().all(|b| b.is_ascii_digit() || b == b'.'))
}

/// The decimal digits of `n`, in a buffer and where they start.
fn digits(mut n: u64) -> ([u8; 20], usize) {
    let mut buf = [0u8; 20];
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return (buf, at);
        }
    }
}

/// The order of two folded lines' text, counts included, without making it.
fn line_order(names: &[String], a: &(Box<[u32]>, u64), b: &(Box<[u32]>, u64)) -> Ordering {
    let (da, ia) = digits(a.1);
    let (db, ib) = digits(b.1);
    let (ta, tb) = texts_apart(names, &a.0, &b.0);
    let ta = ta.chain([b' ']).chain(da[ia..].iter().copied());
    let tb = tb.chain([b' ']).chain(db[ib..].iter().copied());
    ta.cmp(tb)
}

/// A run of frames under one parent.
struct Level {
    /// The next line, and the end of the parent's run.
    next: usize,
    end: usize,
    /// The depth of the run's frames (0: the outermost).
    depth: usize,
}

/// Narrow runs beside each other, to be one line: the first one's first
/// line cut at the run's frame (or a frame below it) with the runs' sum.
struct Group {
    first: usize,
    count: u64,
    depth: usize,
}

/// The text of `lines` (in inferno's order) cut below the runs narrower
/// than `cut`.
fn cut_text(names: &[String], lines: &[(Box<[u32]>, u64)], cut: f64) -> String {
    // Frames compare by name: functions of one name are one frame.
    let mut by_name: HashMap<&str, u32> = HashMap::new();
    let same: Vec<u32> = (names.iter().enumerate())
        .map(|(i, n)| *by_name.entry(n).or_insert(i as u32))
        .collect();
    let unknown = by_name.get("[unknown]").copied().unwrap_or(u32::MAX);
    let frame = |i: usize, depth: usize| {
        (lines[i].0.get(depth)).map(|&f| same.get(f as usize).copied().unwrap_or(unknown))
    };
    // Names another name begins with (`f` of `f::g` or `f [inlined]`): a
    // line ending in one could sort apart from the lines it stands for,
    // so a group's line keeps a frame below it.
    let mut sorted: Vec<&str> = by_name.keys().copied().collect();
    sorted.sort_unstable();
    let stems: HashSet<&str> = (sorted.windows(2))
        .filter(|w| w[1].starts_with(w[0]))
        .map(|w| w[0])
        .collect();
    let stem: Vec<bool> = (names.iter()).map(|n| stems.contains(n.as_str())).collect();
    let mut out = String::new();
    let flush = |out: &mut String, group: &mut Option<Group>| {
        if let Some(g) = group.take() {
            let path = &lines[g.first].0;
            let f = path[g.depth] as usize;
            let below = usize::from(stem.get(f).copied().unwrap_or(true));
            push_line(
                out,
                names,
                &path[..path.len().min(g.depth + 1 + below)],
                g.count,
            );
        }
    };
    let mut group: Option<Group> = None;
    let mut todo = vec![Level {
        next: 0,
        end: lines.len(),
        depth: 0,
    }];
    while let Some(level) = todo.last_mut() {
        let (i, end, depth) = (level.next, level.end, level.depth);
        if i == end {
            flush(&mut out, &mut group);
            todo.pop();
            continue;
        }
        let Some(f) = frame(i, depth) else {
            // A line that ends at the parent: every frame of it is drawn.
            flush(&mut out, &mut group);
            push_line(&mut out, names, &lines[i].0, lines[i].1);
            level.next += 1;
            continue;
        };
        let mut j = i;
        let mut width = 0u64;
        while j < end && frame(j, depth) == Some(f) {
            width += lines[j].1;
            j += 1;
        }
        level.next = j;
        if width as f64 >= cut {
            flush(&mut out, &mut group);
            todo.push(Level {
                next: i,
                end: j,
                depth: depth + 1,
            });
            continue;
        }
        match &mut group {
            // The run joins the group if their sum stays narrow and the
            // line after it is not of the group's first frame (the
            // group's line would run on into it).
            Some(g)
                if ((g.count + width) as f64) < cut
                    && (j == end || frame(j, depth) != frame(g.first, depth)) =>
            {
                g.count += width;
            }
            _ => {
                flush(&mut out, &mut group);
                group = Some(Group {
                    first: i,
                    count: width,
                    depth,
                });
            }
        }
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
/// below the frames it leaves out as too narrow (see [`drawn_text`]),
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
    let text = drawn_text(p, opt.min_width, MARGIN);
    draw(&mut opt, &text, piece_bytes, each)
}

/// The folded lines [`svg`] draws `p`'s flame graph from (frames named as
/// in viewers): every stack cut below the frames inferno leaves out as
/// narrower than 0.01 % of the total.
pub fn svg_text(p: &ResolvedProfile) -> String {
    let min_width = svg_options(p, "").min_width;
    drawn_text(p, min_width, MARGIN)
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
    use crate::model::{FrameRef, FunctionInfo, ResolvedStack};
    use crate::testdata::{known, off_cpu};

    /// inferno's picture of `text` for `p`.
    fn picture(p: &ResolvedProfile, text: &str) -> Vec<u8> {
        let mut opt = svg_options(p, "t");
        let mut out = Vec::new();
        draw(&mut opt, text, usize::MAX, |piece| {
            out = piece;
            true
        })
        .unwrap();
        out
    }

    /// inferno's picture of `p`'s whole folded text, and of the text cut
    /// with `margin`; and the cut text, and the whole text's length.
    fn pictures(p: &ResolvedProfile, margin: f64) -> (Vec<u8>, Vec<u8>, String, usize) {
        let names: Vec<String> = p.functions.iter().map(|f| clean(frame_name(f))).collect();
        let whole = text_of(&names, &merged_lines(p, &names));
        let min_width = svg_options(p, "t").min_width;
        let cut = drawn_text(p, min_width, margin);
        (picture(p, &whole), picture(p, &cut), cut, whole.len())
    }

    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    fn function(name: &str, inlined: bool) -> FunctionInfo {
        FunctionInfo {
            name: name.into(),
            module: "prog".into(),
            inlined,
            ..Default::default()
        }
    }

    /// Stacks (outermost first) as a profile of `functions`.
    fn profile(functions: Vec<FunctionInfo>, stacks: Vec<(Vec<u32>, u64)>) -> ResolvedProfile {
        let stacks: Vec<ResolvedStack> = stacks
            .into_iter()
            .map(|(path, count)| ResolvedStack {
                tid: 1,
                frames: (path.iter().rev())
                    .map(|&function| FrameRef {
                        function,
                        line: 0,
                        address: 0x1000,
                    })
                    .collect(),
                count,
            })
            .collect();
        ResolvedProfile {
            attributed: stacks.iter().map(|s| s.count).sum(),
            functions,
            stacks,
            ..known()
        }
    }

    /// 20 000 distinct deep stacks of one sample beside three heavy ones,
    /// under a few shared callers: most frames of the light stacks are far
    /// narrower than inferno draws.
    fn many_tiny_stacks() -> ResolvedProfile {
        let functions = (0..400)
            .map(|i| function(&format!("fn_{i}"), i % 7 == 0))
            .collect();
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut stacks = vec![
            ((0..6).collect(), 300_000),
            (vec![0, 1, 2, 7, 8], 200_000),
            (vec![3, 4], 100_000),
        ];
        for _ in 0..20_000 {
            let depth = 8 + rng.below(24) as usize;
            let path = (0..depth)
                .map(|level| match level {
                    0..=1 => rng.below(3) as u32,
                    2 => 10 + rng.below(8) as u32,
                    _ => 20 + rng.below(380) as u32,
                })
                .collect();
            stacks.push((path, 1));
        }
        profile(functions, stacks)
    }

    #[test]
    fn the_cut_text_draws_the_whole_picture() {
        let p = many_tiny_stacks();
        let (whole, cut, text, _) = pictures(&p, MARGIN);
        assert!(whole == cut, "the flame graph of the cut stacks differs");
        // Most lines and frames are gone.
        let all: usize = p.stacks.iter().map(|s| s.frames.len()).sum();
        let kept: usize = text.lines().map(|l| l.split(';').count()).sum();
        assert!(
            text.lines().count() < 2_000,
            "{} lines",
            text.lines().count()
        );
        assert!(kept * 20 < all, "{kept} frames of {all} kept");
        for p in [known(), off_cpu()] {
            let (whole, cut, ..) = pictures(&p, MARGIN);
            assert!(whole == cut, "the flame graph of the cut stacks differs");
        }
    }

    #[test]
    fn cutting_too_much_changes_the_picture() {
        let (whole, cut, ..) = pictures(&many_tiny_stacks(), 10.0 * MARGIN);
        assert!(whole != cut, "a cut ten times wider changes nothing");
    }

    /// Names that sort against each other in ways a tree would not: one
    /// another's prefix, followed by a space, `::`, `.`, a digit.
    #[test]
    fn names_that_sort_oddly_keep_the_picture() {
        let names = [
            ("f", false),
            ("f", true),
            ("f::x", false),
            ("f.cold", false),
            ("f1", false),
            ("f (x)", false),
            ("g", false),
            ("g", false),
            ("f-g", false),
            ("[unknown]", false),
        ];
        let functions: Vec<FunctionInfo> = (names.iter()).map(|&(n, i)| function(n, i)).collect();
        let mut rng = Rng(7);
        let mut cuts = 0;
        for round in 0..300 {
            let stacks = (0..50 + rng.below(400))
                .map(|_| {
                    let depth = 1 + rng.below(8) as usize;
                    let path: Vec<u32> = (0..depth)
                        .map(|_| rng.below(names.len() as u64) as u32)
                        .collect();
                    let count = match rng.below(10) {
                        0 => 1000 + rng.below(50_000),
                        _ => 1 + rng.below(5),
                    };
                    (path, count)
                })
                .collect();
            let p = profile(functions.clone(), stacks);
            let (whole, cut, text, all) = pictures(&p, MARGIN);
            assert!(whole == cut, "round {round}: the pictures differ");
            cuts += usize::from(text.len() < all / 2);
        }
        assert!(cuts > 30, "only {cuts} profiles cut");
    }

    #[test]
    fn names_inferno_reads_otherwise_are_not_cut() {
        for name in ["", " f", "f ", "# f", "f 12", "f 1.5"] {
            assert!(!plain(name), "{name:?}");
        }
        for name in ["f", "f [inlined]", "[off-cpu: blocked]", "f#", "f 1x"] {
            assert!(plain(name), "{name:?}");
        }
        let mut p = many_tiny_stacks();
        p.functions[300].name = "worker 3".into();
        let (whole, cut, text, _) = pictures(&p, MARGIN);
        assert!(whole == cut);
        assert!(text.lines().count() > 20_000, "the text was cut");
    }

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
    fn svg_of_nothing_is_still_svg() {
        let svg = String::from_utf8(svg(&ResolvedProfile::default(), "empty").unwrap()).unwrap();
        assert!(svg.contains("<svg") && svg.trim_end().ends_with("</svg>"));
    }

    #[test]
    fn off_cpu_frames_count_nanoseconds() {
        let svg = String::from_utf8(svg(&off_cpu(), "prog").unwrap()).unwrap();
        assert!(svg.contains("off-CPU time (ns)"), "no subtitle");
        assert!(svg.contains(" ns, "), "frames count ns");
        assert!(!svg.contains(" samples, "), "frames count ns");
    }
}
