//! Views of a saved pprof file, computed here with the same code the daemon
//! uses (`profd_common::views`), so that `profctl report FILE` answers as
//! `profctl report SESSION` does. Reads the file; no daemon calls.
use std::path::Path;

use profd_common::api::get_view_request::View;
use profd_common::api::{Function, FunctionRef, GetViewResponse, Session, Totals};
use profd_common::model::ResolvedProfile;
use profd_common::{export, views};

use crate::error::Error;

/// Reads and decodes a pprof file (gzip'd or not).
pub fn load(path: &Path) -> Result<ResolvedProfile, Error> {
    let bad = |reason: String| Error::BadFile {
        path: path.to_path_buf(),
        reason,
    };
    let data = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    export::pprof_decode(&data).map_err(|e| bad(e.to_string()))
}

/// The session a saved profile stands for: its target, frequency, duration,
/// mode and attributed samples or time (no id, state or other totals: the
/// file has none).
pub fn session(profile: &ResolvedProfile) -> Session {
    Session {
        mode: profile.mode as i32,
        pid: profile.pid,
        comm: profile.comm.clone(),
        frequency_hz: profile.frequency_hz,
        duration_s: profile.duration_s,
        totals: Some(Totals {
            attributed: profile.attributed,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Every function of the profile with its counts.
pub fn functions(profile: &ResolvedProfile) -> Vec<Function> {
    views::functions(profile)
}

/// The view `view` of the profile, as the daemon's GetView would give it.
pub fn view(profile: &ResolvedProfile, view: &View) -> Result<GetViewResponse, Error> {
    let mut reply = GetViewResponse {
        session: Some(session(profile)),
        functions: views::functions(profile),
        attributed: profile.attributed,
        ..Default::default()
    };
    match view {
        View::Tree(t) => {
            reply.nodes = views::call_tree(
                profile,
                views::Direction::of(t.bottom_up),
                t.min_pct,
                t.max_depth,
            );
        }
        View::HotPath(t) => {
            reply.nodes = views::hot_path(profile, views::Direction::of(t.bottom_up), t.min_pct)
        }
        View::Callers(f) => {
            let id = find(profile, f)?;
            reply.caller_callee = Some(views::callers_callees(profile, id));
        }
        View::Threads(_) => reply.threads = views::threads(profile, &Default::default()),
        View::Functions(_) => {}
        View::Lines(f) => {
            let id = find(profile, f)?;
            reply.lines = views::lines(profile, id);
        }
    }
    Ok(reply)
}

fn find(profile: &ResolvedProfile, f: &FunctionRef) -> Result<u32, Error> {
    profd_common::names::find_function(profile, f).map_err(|e| Error::Usage(e.to_string()))
}

#[cfg(test)]
#[path = "pprof_file_tests.rs"]
mod tests;
