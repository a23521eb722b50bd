//! Why a row of ClickHouse's answer to `profctl fleet` cannot be read
//! (see `requests::fleet::merge`).

/// A row of ClickHouse's answer that profctl cannot read.
#[derive(Debug, thiserror::Error)]
pub enum RowError {
    /// Not the JSON of a row.
    #[error("a row ClickHouse sent: {0}")]
    Json(#[from] serde_json::Error),
    /// A string where a number belongs, that holds none.
    #[error("not a number: {0:?}")]
    NotANumber(String),
    /// A stack whose hash the stack dictionary (`frames`) lacks.
    #[error("stack {0} has no row in the table frames: were its rows dropped (retention) before the stacks referring to them?")]
    NoFrames(u64),
}
