//! The subcommands, each a function of a connected client and its
//! arguments; shared helpers for unwrapping replies.
mod admin;
mod attach;
mod export;
mod histogram;
mod report;
mod run;

pub use admin::{health, info, sessions, stop};
pub use attach::attach;
pub use export::export;
pub use histogram::histogram;
pub use report::{report_file, report_file_text, report_session, view_request, view_text};
pub use run::{held_exec, run};

use profd_common::api::Session;

use crate::error::Error;

/// The session a reply must carry.
fn required_session(session: Option<Session>, rpc: &str) -> Result<Session, Error> {
    session.ok_or_else(|| Error::Protocol(format!("the {rpc} reply has no session")))
}
