//! The subcommands, each a function of a connected client and its
//! arguments; shared helpers for unwrapping replies.
mod admin;
mod profile;
mod run;

pub use admin::{info, sessions, stop};
pub use profile::attach;
pub use run::run;

use profd_common::api::Session;

use crate::error::Error;

/// The session a reply must carry.
fn required_session(session: Option<Session>, rpc: &str) -> Result<Session, Error> {
    session.ok_or_else(|| Error::Protocol(format!("the {rpc} reply has no session")))
}
