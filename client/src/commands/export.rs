//! `profctl export` (and `profctl query --format`, `run -o`, `attach -o`):
//! GetProfile with a format, its bytes written to a file or stdout.
use std::io::Write as _;
use std::path::{Path, PathBuf};

use profd_common::api::{ExportFormat, GetProfileRequest};

use super::{required_session, Source};
use crate::cli::{ExportArgs, ExportFormatArg};
use crate::connect::Client;
use crate::error::Error;
use crate::output::Output;
use crate::progress::waiting;
use crate::render;

/// Writes session `args.session` in `args.format` to `args.output`.
pub async fn export(client: &mut Client, args: &ExportArgs, out: &Output) -> Result<(), Error> {
    let source = Source::Session(args.session);
    export_source(client, &source, args.format, &args.output, out).await
}

/// `-o` of `run` and `attach`: writes session `id`'s whole profile to the
/// file in its encoding, once the session has ended.
pub(super) async fn record(
    client: &mut Client,
    id: u64,
    recording: Option<(PathBuf, ExportFormatArg)>,
    out: &Output,
) -> Result<(), Error> {
    match recording {
        Some((path, format)) => {
            export_source(client, &Source::Session(id), format, &path, out).await
        }
        None => Ok(()),
    }
}

/// Writes a session or the continuous history in `format` to `output`
/// (`-` for stdout).
pub async fn export_source(
    client: &mut Client,
    source: &Source,
    format: ExportFormatArg,
    output: &Path,
    out: &Output,
) -> Result<(), Error> {
    let to_stdout = output == Path::new("-");
    if to_stdout && out.is_terminal() && format == ExportFormatArg::Pprof {
        return Err(Error::Usage(
            "a pprof export is binary (gzip): give -o FILE rather than a terminal".into(),
        ));
    }
    let reply = waiting(
        &format!("exporting {}", source.name()),
        client.get_profile(GetProfileRequest {
            session_id: source.session_id(),
            format: ExportFormat::from(format) as i32,
            query: source.query(),
        }),
    )
    .await?
    .into_inner();
    let session = required_session(reply.session, "GetProfile")?;
    // Only folded stacks of a session without samples are empty.
    if reply.data.is_empty() && format != ExportFormatArg::Folded {
        return Err(Error::Protocol(format!(
            "the GetProfile reply has no {format:?} data"
        )));
    }
    if to_stdout {
        let mut stdout = std::io::stdout().lock();
        return stdout
            .write_all(&reply.data)
            .and_then(|()| stdout.flush())
            .map_err(Error::Output);
    }
    crate::out_file::write_file(output, &reply.data)
        .map_err(|e| Error::io(format!("cannot write {}", output.display()), e))?;
    eprintln!(
        "profctl: wrote {} ({} bytes) for {}",
        output.display(),
        reply.data.len(),
        render::session_line(&session).trim_end()
    );
    Ok(())
}
