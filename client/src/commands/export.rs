//! `profctl export` (and `profctl query --format`, `run -o`, `attach -o`):
//! GetProfile with a format, its bytes written to a file or stdout.
use std::io::Write as _;
use std::path::{Path, PathBuf};

use profd_common::api::{ExportFormat, GetProfileRequest};

use super::report::{name_off_host, refuse_symbols_for_a_session};
use super::{required_session, Source};
use crate::args::cli::{ExportArgs, ExportFormatArg, ReportSource};
use crate::error::Error;
use crate::files::pprof_file;
use crate::requests::connect::Client;
use crate::requests::progress::waiting;
use crate::views::output::Output;
use crate::views::render;
use profd_common::api::Session;
use profd_common::export;
use profd_common::model::ResolvedProfile;

/// Writes session `args.source` in `args.format` to `args.output`.
pub async fn export(client: &mut Client, args: &ExportArgs, out: &Output) -> Result<(), Error> {
    let ReportSource::Session(id) = args.source() else {
        return export_file(args, out).await;
    };
    refuse_symbols_for_a_session(&args.symbols.sources)?;
    export_source(client, &Source::Session(id), args.format, &args.output, out).await
}

/// Writes the saved pprof file `args.source` in `args.format` (its
/// stripped code named first, with `--symbols`), without a daemon.
pub async fn export_file(args: &ExportArgs, out: &Output) -> Result<(), Error> {
    let mut profile = pprof_file::load(&args.source)?;
    name_off_host(&mut profile, &args.symbols.sources).await?;
    let title = format!("{} — {}", args.source.display(), profile.comm);
    let what = format!(
        "{} samples of {}",
        profile.attributed,
        args.source.display()
    );
    write_profile(&profile, args.format, &title, &args.output, out, &what)
}

/// Writes a profile held here (a file's, the fleet's) in `format` to
/// `output` (`-`: stdout), computed as the daemon computes its exports;
/// `what` says on stderr what was written.
pub fn write_profile(
    p: &ResolvedProfile,
    format: ExportFormatArg,
    title: &str,
    output: &Path,
    out: &Output,
    what: &str,
) -> Result<(), Error> {
    let to_stdout = to_stdout(format, output, out)?;
    let data = match format {
        ExportFormatArg::Pprof => export::pprof(p),
        ExportFormatArg::Folded => export::folded(p).into_bytes(),
        ExportFormatArg::Svg => {
            export::svg(p, title).map_err(|e| Error::Usage(format!("flame graph: {e}")))?
        }
        ExportFormatArg::Speedscope => export::speedscope(p).into_bytes(),
        ExportFormatArg::Firefox => {
            return Err(Error::Usage(
                "a pprof file and the fleet's windows keep no sample times, so they have no \
                 timeline: use another --format"
                    .into(),
            ))
        }
        ExportFormatArg::Json => serde_json::to_vec_pretty(&export::json(
            &pprof_file::session(p),
            &pprof_file::functions(p),
        ))
        .map_err(|e| Error::Usage(e.to_string()))?,
    };
    if to_stdout {
        return write_stdout(&data);
    }
    write_file(output, &data)?;
    eprintln!(
        "profctl: wrote {} ({} bytes): {what}",
        output.display(),
        data.len()
    );
    Ok(())
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
    let to_stdout = to_stdout(format, output, out)?;
    let request = GetProfileRequest {
        session_id: source.session_id(),
        format: ExportFormat::from(format) as i32,
        query: source.query(),
    };
    let (session, data) = waiting(
        &format!("exporting {}", source.name()),
        streamed(client, request, to_stdout),
    )
    .await?;
    // Only folded stacks of a session without samples are empty.
    if data.is_empty() && !to_stdout && format != ExportFormatArg::Folded {
        return Err(Error::Protocol(format!(
            "the StreamProfile reply has no {format:?} data"
        )));
    }
    if to_stdout {
        return Ok(());
    }
    write_file(output, &data)?;
    eprintln!(
        "profctl: wrote {} ({} bytes) for {}",
        output.display(),
        data.len(),
        render::session_line(&session).trim_end()
    );
    Ok(())
}

/// The session and export bytes of `request`, read with StreamProfile in
/// pieces (or, from a daemon without it, GetProfile whole); with
/// `to_stdout` each piece is written to stdout as it comes, and none kept.
async fn streamed(
    client: &mut Client,
    request: GetProfileRequest,
    to_stdout: bool,
) -> Result<(Session, Vec<u8>), Error> {
    let mut stream = match client.stream_profile(request.clone()).await {
        Ok(stream) => stream.into_inner(),
        Err(status) if status.code() == tonic::Code::Unimplemented => {
            let reply = client.get_profile(request).await?.into_inner();
            let session = required_session(reply.session, "GetProfile")?;
            if to_stdout {
                write_stdout(&reply.data)?;
                return Ok((session, Vec::new()));
            }
            return Ok((session, reply.data));
        }
        Err(status) => return Err(status.into()),
    };
    let mut session = None;
    let mut data = Vec::new();
    while let Some(piece) = stream.message().await? {
        if session.is_none() {
            session = Some(required_session(piece.session, "StreamProfile")?);
        }
        if to_stdout {
            write_stdout(&piece.data)?;
        } else {
            data.extend_from_slice(&piece.data);
        }
    }
    let session = required_session(session, "StreamProfile")?;
    Ok((session, data))
}

/// Whether an export goes to stdout (`-o -`); a binary pprof export is
/// refused there when stdout is a terminal.
fn to_stdout(format: ExportFormatArg, output: &Path, out: &Output) -> Result<bool, Error> {
    let to_stdout = output == Path::new("-");
    if to_stdout && out.is_terminal() && format == ExportFormatArg::Pprof {
        return Err(Error::Usage(
            "a pprof export is binary (gzip): give -o FILE rather than a terminal".into(),
        ));
    }
    Ok(to_stdout)
}

/// Writes an export to the file `output`, safely (see `out_file`).
fn write_file(output: &Path, data: &[u8]) -> Result<(), Error> {
    crate::files::out_file::write_file(output, data)
        .map_err(|e| Error::io(format!("cannot write {}", output.display()), e))
}

fn write_stdout(data: &[u8]) -> Result<(), Error> {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(data)
        .and_then(|()| stdout.flush())
        .map_err(Error::Output)
}
