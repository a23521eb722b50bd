//! Unit tests of `pprof_file`.
use super::*;
use crate::views::ranking::Profile;
use crate::views::render::{profile_rows, TableOptions};
use crate::views::render_views::file_header;
use profd_common::api::Mode;
use profd_common::model::{FrameRef, FunctionInfo, ResolvedStack};

#[test]
fn an_off_cpu_file_reads_back_as_time() {
    let f = |name: &str| FunctionInfo {
        name: name.into(),
        module: "w".into(),
        ..Default::default()
    };
    let fr = |function| FrameRef {
        function,
        line: 0,
        address: 0x1000 + u64::from(function),
    };
    let stack = |frames, count| ResolvedStack {
        tid: 7,
        frames,
        count,
    };
    let profile = ResolvedProfile {
        functions: vec![f("[off-cpu: blocked]"), f("main"), f("read_pipe")],
        stacks: vec![
            stack(vec![fr(2), fr(1), fr(0)], 2_000_000_000),
            stack(vec![fr(1), fr(0)], 1_000_000_000),
        ],
        attributed: 3_000_000_000,
        duration_s: 4.0,
        pid: 7,
        comm: "w".into(),
        mode: Mode::OffCpu,
        ..Default::default()
    };
    let dir = std::env::temp_dir().join(format!("profctl-pprof-file-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("off-cpu.pb.gz");
    std::fs::write(&path, export::pprof(&profile)).unwrap();
    let back = load(&path).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let s = session(&back);
    assert_eq!(s.mode(), Mode::OffCpu);
    assert_eq!(
        file_header("off-cpu.pb.gz", &s),
        "profile off-cpu.pb.gz — pid 7 (w) — off-cpu — 4.00 s\ntime: 3.00 s attributed\n"
    );
    let rows = profile_rows(&Profile::new(s, functions(&back)), TableOptions::default());
    assert!(
        rows.contains(" 66.7%     2.00 s   66.7%     2.00 s  read_pipe  [w]\n"),
        "{rows}"
    );
    assert!(
        rows.contains("100.0%     3.00 s   33.3%     1.00 s  main  [w]\n"),
        "{rows}"
    );
}
