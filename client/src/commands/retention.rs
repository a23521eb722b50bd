//! `profctl retention`: the partitions of profd's ClickHouse tables older
//! than each table's keep, dropped or printed.
use std::time::SystemTime;

use crate::args::cli::RetentionArgs;
use crate::commands::fleet::connect;
use crate::error::Error;
use crate::requests::retention::{drops, Keep};
use crate::views::output::Output;

/// Runs `profctl retention`.
pub async fn retention(args: &RetentionArgs, out: &Output) -> Result<(), Error> {
    let server = connect(&args.server)?;
    let keep = Keep {
        raw: args.raw,
        minutes: args.minutes,
        hours: args.hours,
    };
    let parts = server.parts().await?;
    let statements = drops(&args.server.database, &parts, keep, SystemTime::now());
    let mut text = String::new();
    for statement in statements {
        if args.run {
            server.run(statement.clone()).await?;
        }
        text.push_str(&statement);
        text.push_str(if args.run { "; -- done\n" } else { ";\n" });
    }
    out.print(&text)
}
