//! `profctl retention`'s plan: which partitions of profd's ClickHouse
//! tables are wholly older than each table's keep, as `ALTER TABLE … DROP
//! PARTITION` statements (ClickHouse 18.16 has no `TTL`).
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long each table keeps its rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keep {
    /// `stacks` and `windows`.
    pub raw: Duration,
    /// `stacks_minutes`.
    pub minutes: Duration,
    /// `stacks_hours`.
    pub hours: Duration,
}

/// The span of a `frames` partition (the sink's, 30 days).
const FRAMES_SPAN_S: u64 = 30 * 24 * 3600;
/// A day: how much later than its keep a daily or monthly partition goes,
/// so that the server's time zone, which names those partitions, does not
/// matter.
const DAY_S: u64 = 24 * 3600;

/// The query of the partitions of `database` (TabSeparated: table,
/// partition).
pub fn parts_sql(database: &str) -> String {
    format!(
        "SELECT table, partition FROM system.parts WHERE database = '{database}' AND active \
         GROUP BY table, partition ORDER BY table, partition FORMAT TabSeparated"
    )
}

/// Unix seconds of `YYYY-MM-DD` at 00:00 UTC.
fn day(text: &str) -> Option<u64> {
    let t = humantime::parse_rfc3339(&format!("{text}T00:00:00Z")).ok()?;
    Some(t.duration_since(UNIX_EPOCH).ok()?.as_secs())
}

/// When the rows of a partition end (Unix seconds), by its table's
/// partition key, and how it is written in `DROP PARTITION`.
fn end(table: &str, partition: &str) -> Option<(u64, String)> {
    let partition = partition.trim_matches('\'');
    match table {
        "windows" | "stacks" | "stacks_minutes" => {
            Some((day(partition)? + DAY_S + DAY_S, format!("'{partition}'")))
        }
        "stacks_hours" => {
            let n: u32 = partition.parse().ok()?;
            let (y, m) = (n / 100, n % 100);
            let next = if m == 12 {
                format!("{}-01-01", y + 1)
            } else {
                format!("{y}-{:02}-01", m + 1)
            };
            Some((day(&next)? + DAY_S, partition.to_string()))
        }
        "frames" => {
            let n: u64 = partition.parse().ok()?;
            Some(((n + 1) * FRAMES_SPAN_S, partition.to_string()))
        }
        _ => None,
    }
}

/// The statements that drop the partitions of `parts` (table,
/// partition: [`parts_sql`]'s answer) wholly older than `keep` at `now`.
/// The tables are the `*_local` ones where the database has them (a
/// cluster's), else the plain ones; other tables are left alone.
pub fn drops(database: &str, parts: &str, keep: Keep, now: SystemTime) -> Vec<String> {
    let now = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let rows: Vec<(&str, &str)> = parts.lines().filter_map(|l| l.split_once('\t')).collect();
    let cluster = rows.iter().any(|(t, _)| *t == "stacks_local");
    let frames = keep.raw.max(keep.minutes).max(keep.hours);
    let mut out = Vec::new();
    for (table, partition) in rows {
        let name = match cluster {
            true => match table.strip_suffix("_local") {
                Some(name) => name,
                None => continue,
            },
            false => table,
        };
        let keep = match name {
            "windows" | "stacks" => keep.raw,
            "stacks_minutes" => keep.minutes,
            "stacks_hours" => keep.hours,
            "frames" => frames,
            _ => continue,
        };
        let Some((end, value)) = end(name, partition) else {
            continue;
        };
        if end.saturating_add(keep.as_secs()) <= now {
            out.push(format!(
                "ALTER TABLE {database}.{table} DROP PARTITION {value}"
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEEP: Keep = Keep {
        raw: Duration::from_secs(3 * DAY_S),
        minutes: Duration::from_secs(30 * DAY_S),
        hours: Duration::from_secs(365 * DAY_S),
    };

    fn at(date: &str) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(day(date).unwrap())
    }

    #[test]
    fn each_table_keeps_its_own_time() {
        let parts = "stacks\t2026-12-01\nstacks\t2026-12-03\nwindows\t2026-12-01\n\
                     stacks_minutes\t2026-11-06\nstacks_minutes\t2026-11-04\n\
                     stacks_hours\t202511\nstacks_hours\t202512\n\
                     frames\t679\nframes\t680\nstacks_v1\t2026-01-01\n";
        let d = drops("profd", parts, KEEP, at("2026-12-07"));
        assert_eq!(
            d,
            [
                "ALTER TABLE profd.stacks DROP PARTITION '2026-12-01'",
                "ALTER TABLE profd.windows DROP PARTITION '2026-12-01'",
                "ALTER TABLE profd.stacks_minutes DROP PARTITION '2026-11-04'",
                "ALTER TABLE profd.stacks_hours DROP PARTITION 202511",
                "ALTER TABLE profd.frames DROP PARTITION 679",
            ]
        );
        // 2026-12-01 ends 12-02; a day for the time zone, 3 days kept:
        // it goes at 12-06, not before.
        let d = drops("profd", "stacks\t2026-12-01\n", KEEP, at("2026-12-05"));
        assert!(d.is_empty(), "{d:?}");
    }

    #[test]
    fn a_clusters_local_tables_lose_their_partitions() {
        let parts = "stacks_local\t2026-12-01\nstacks\t2026-12-01\nframes_local\t1\n";
        let d = drops("p", parts, KEEP, at("2026-12-07"));
        assert_eq!(
            d,
            [
                "ALTER TABLE p.stacks_local DROP PARTITION '2026-12-01'",
                "ALTER TABLE p.frames_local DROP PARTITION 1",
            ]
        );
    }
}
