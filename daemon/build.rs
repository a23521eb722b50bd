//! Builds the BPF program that reads interpreter frames at sample time
//! (`src/os/bpf/python.bpf.c`) with clang, into `OUT_DIR`. Without clang
//! the daemon is built without it, says so when it starts, and counts the
//! frames it cannot read.
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let source = "src/os/bpf/python.bpf.c";
    println!("cargo:rerun-if-changed={source}");
    println!("cargo:rerun-if-changed=src/os/bpf/ruby.bpf.h");
    println!("cargo:rerun-if-changed=src/os/bpf/perl.bpf.h");
    println!("cargo:rerun-if-env-changed=CLANG");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"))
        .join("python.bpf.o");
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".to_string());
    let built = Command::new(&clang)
        .args(["-O2", "-g0", "-target", "bpf", "-c", source, "-o"])
        .arg(&out)
        .status();
    match built {
        Ok(status) if status.success() => {}
        Ok(status) => panic!("{clang} failed to build {source}: {status}"),
        Err(err) => {
            println!(
                "cargo:warning=no {clang} ({err}): profd is built without its BPF frame reader; \
                 install clang to read Python, Ruby and Perl frames"
            );
            std::fs::write(&out, []).expect("write an empty object");
        }
    }
}
