//! Folded stacks (Brendan Gregg's FlameGraph input) and the SVG flame graph
//! inferno draws from them.
use std::collections::BTreeMap;

use super::{frame_name, ExportError};
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
fn clean(name: String) -> String {
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
    fold(p, annotated)
}

/// Folded stacks with frames named by `name`.
fn fold(p: &ResolvedProfile, name: fn(&FunctionInfo) -> String) -> String {
    let names: Vec<String> = p.functions.iter().map(|f| clean(name(f))).collect();
    let mut lines: BTreeMap<String, u64> = BTreeMap::new();
    for s in p
        .stacks
        .iter()
        .filter(|s| !s.frames.is_empty() && s.count > 0)
    {
        let path: Vec<&str> = s
            .frames
            .iter()
            .rev()
            .map(|f| {
                names
                    .get(f.function as usize)
                    .map_or("[unknown]", String::as_str)
            })
            .collect();
        *lines.entry(path.join(";")).or_default() += s.count;
    }
    // Sized once: a large profile's text is tens of MiB.
    let size = lines.keys().map(|path| path.len() + 22).sum();
    let mut out = String::with_capacity(size);
    for (path, count) in lines {
        out.push_str(&path);
        out.push(' ');
        out.push_str(&count.to_string());
        out.push('\n');
    }
    out
}

/// An SVG flame graph of the folded stacks (inferno), titled `title`. A
/// profile without samples gives inferno's picture saying so. Frames are
/// named as in viewers (`name [inlined]`: inferno would hide the folded
/// annotations). Frames count
/// `samples`, or for off-CPU and wall-clock profiles `ns`, with a subtitle
/// saying which time.
pub fn svg(p: &ResolvedProfile, title: &str) -> Result<Vec<u8>, ExportError> {
    let text = fold(p, frame_name);
    let mut opt = inferno::flamegraph::Options::default();
    opt.title = title.to_string();
    opt.count_name = if is_time(p.mode) { "ns" } else { "samples" }.to_string();
    opt.subtitle = match p.mode {
        Mode::OffCpu => Some("off-CPU time (ns)".to_string()),
        Mode::Wall => Some("wall-clock time, on- and off-CPU (ns)".to_string()),
        Mode::Cpu | Mode::Unspecified => None,
    };
    let mut out = Vec::new();
    match inferno::flamegraph::from_lines(&mut opt, text.lines(), &mut out) {
        Ok(()) => Ok(out),
        // No stack counts: inferno has drawn its message and ends the SVG.
        Err(_) if text.is_empty() && !out.is_empty() => Ok(out),
        Err(e) => Err(ExportError::FlameGraph(e)),
    }
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
