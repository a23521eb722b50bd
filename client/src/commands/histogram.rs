//! `profctl histogram`: GetHistogram for one module of a session's target,
//! printed, and optionally written as a gmon.out for gprof.
use profd_common::api::GetHistogramRequest;

use super::required_session;
use crate::args::cli::{HistogramArgs, MAX_BUCKETS};
use crate::error::Error;
use crate::files::gmon::{self, Histogram, Layout};
use crate::requests::connect::Client;
use crate::requests::progress::waiting;
use crate::views::output::Output;
use crate::views::render;

/// Prints the histogram `args` asks for (and writes `--gmon`).
pub async fn histogram(
    client: &mut Client,
    args: &HistogramArgs,
    out: &Output,
) -> Result<(), Error> {
    let text = args.binary.as_deref().map(gmon::read_text).transpose()?;
    let module = match (&args.module, &args.binary) {
        (Some(m), _) => m.clone(),
        (None, Some(b)) => b
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| Error::Usage(format!("{} names no file", b.display())))?,
        (None, None) => {
            return Err(Error::Usage(
                "--module is needed (or --binary, whose file name it then is)".into(),
            ))
        }
    };
    let layout = Layout::derive(args.offset, args.scale, args.buckets, text, MAX_BUCKETS)?;
    let reply = waiting(
        &format!("reading the histogram of session {}", args.session),
        client.get_histogram(GetHistogramRequest {
            session_id: args.session,
            module: module.clone(),
            offset: layout.offset,
            scale: layout.scale,
            buckets: layout.buckets,
        }),
    )
    .await?
    .into_inner();
    let session = required_session(reply.session, "GetHistogram")?;
    if reply.counts.len() != layout.buckets as usize {
        return Err(Error::Protocol(format!(
            "asked for {} buckets, got {}",
            layout.buckets,
            reply.counts.len()
        )));
    }
    let frequency_hz = if reply.frequency_hz > 0 {
        reply.frequency_hz
    } else {
        session.frequency_hz
    };
    let histogram = Histogram {
        layout,
        module,
        counts: reply.counts,
        out_of_range: reply.out_of_range,
        other: reply.other,
        frequency_hz,
    };
    let mut report = render::table_header(&session);
    report.push_str(&gmon::histogram_text(&histogram));
    if let Some(path) = &args.gmon {
        let pc_bytes = text.map_or(std::mem::size_of::<usize>(), |t| t.pc_bytes);
        let bytes = gmon::gmon_out(
            layout.offset,
            layout.high_pc(),
            frequency_hz,
            &histogram.counts,
            pc_bytes,
        );
        crate::files::out_file::write_file(path, &bytes)
            .map_err(|e| Error::io(format!("cannot write {}", path.display()), e))?;
        eprintln!(
            "profctl: wrote {}; read it with `gprof {} {}`",
            path.display(),
            args.binary
                .as_deref()
                .map_or_else(|| "BINARY".to_string(), |b| b.display().to_string()),
            path.display()
        );
    }
    out.print(&report)
}
