//! The subcommands, each a function of a connected client and its
//! arguments; shared helpers for unwrapping replies.
mod admin;
mod attach;
mod diff;
mod export;
mod fleet;
mod histogram;
mod query;
mod report;
mod retention;
mod run;

pub use admin::{health, info, sessions, stop};
pub use attach::attach;
pub use diff::{diff, diff_needs_no_daemon};
pub use export::{export, export_file, export_source};
pub use fleet::fleet;
pub use histogram::histogram;
pub use query::query;
pub use report::{
    report_daemon, report_file, report_file_text, report_session, view_request, view_text,
};
pub use retention::retention;
pub use run::{check_command, held_exec, run};

use profd_common::api::{self, Session};

use crate::error::Error;

/// What a report or export of the daemon reads: a session, or a query of
/// the continuous history.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// A session by id.
    Session(u64),
    /// The continuous history, merged as the query selects.
    Query(api::Query),
}

impl Source {
    /// The `session_id` of GetProfile and GetView (0 with a query).
    pub fn session_id(&self) -> u64 {
        match self {
            Source::Session(id) => *id,
            Source::Query(_) => 0,
        }
    }

    /// The `query` of GetProfile and GetView.
    pub fn query(&self) -> Option<api::Query> {
        match self {
            Source::Session(_) => None,
            Source::Query(q) => Some(q.clone()),
        }
    }

    /// `session 3` or `the continuous history`, for progress messages.
    pub fn name(&self) -> String {
        match self {
            Source::Session(id) => format!("session {id}"),
            Source::Query(_) => "the continuous history".to_string(),
        }
    }
}

/// The session a reply must carry.
fn required_session(session: Option<Session>, rpc: &str) -> Result<Session, Error> {
    session.ok_or_else(|| Error::Protocol(format!("the {rpc} reply has no session")))
}
