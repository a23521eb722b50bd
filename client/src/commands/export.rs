//! `profctl export`: GetProfile with a format, its bytes written to a file
//! or stdout.
use std::io::Write as _;
use std::path::Path;

use profd_common::api::{ExportFormat, GetProfileRequest};

use super::required_session;
use crate::cli::{ExportArgs, ExportFormatArg};
use crate::connect::Client;
use crate::error::Error;
use crate::output::Output;
use crate::progress::waiting;
use crate::render;

/// Writes session `args.session` in `args.format` to `args.output`.
pub async fn export(client: &mut Client, args: &ExportArgs, out: &Output) -> Result<(), Error> {
    let to_stdout = args.output == Path::new("-");
    if to_stdout && out.is_terminal() && args.format == ExportFormatArg::Pprof {
        return Err(Error::Usage(
            "a pprof export is binary (gzip): give -o FILE rather than a terminal".into(),
        ));
    }
    let reply = waiting(
        &format!("exporting session {}", args.session),
        client.get_profile(GetProfileRequest {
            session_id: args.session,
            format: ExportFormat::from(args.format) as i32,
            query: None,
        }),
    )
    .await?
    .into_inner();
    let session = required_session(reply.session, "GetProfile")?;
    // Only folded stacks of a session without samples are empty.
    if reply.data.is_empty() && args.format != ExportFormatArg::Folded {
        return Err(Error::Protocol(format!(
            "the GetProfile reply has no {:?} data",
            args.format
        )));
    }
    if to_stdout {
        let mut stdout = std::io::stdout().lock();
        return stdout
            .write_all(&reply.data)
            .and_then(|()| stdout.flush())
            .map_err(Error::Output);
    }
    std::fs::write(&args.output, &reply.data)
        .map_err(|e| Error::io(format!("cannot write {}", args.output.display()), e))?;
    eprintln!(
        "profctl: wrote {} ({} bytes) for {}",
        args.output.display(),
        reply.data.len(),
        render::session_line(&session).trim_end()
    );
    Ok(())
}
