//! The daemon's inner parts that the benches, the fuzz targets and the
//! daemon's integration tests drive directly, re-exported item by item.
//! Not a stable API: it changes whenever the daemon's parts do.

pub mod maps {
    pub use crate::process::maps::{Backing, Mapping, ProcessMaps};
}

pub mod perf {
    pub use crate::os::perf::record;
    pub use crate::os::perf::{
        online_cpus, walk_ring, Counts, EventKind, EventSpec, PerfError, Stacks, FP_USER_REGS,
        SAMPLE_TYPE, USER_REGS,
    };
}

pub mod registry {
    pub use crate::sessions::registry::Limits;
}

pub mod rpc {
    pub use crate::serve::rpc::delta;
}

pub mod sampler {
    pub use crate::sampling::{
        monotonic_ns, Batch, BatchPool, Children, Counters, Demux, Drained, Flush, RouteTo,
        SampleSource, Sampler, StackTops, Subscriber, Subscription, Targets, RING_PAGES,
        STACK_RING_PAGES,
    };
}

pub mod session {
    pub use crate::sessions::session::{start, FunctionTable, Ingest, Params};
}

pub mod store {
    pub use crate::sessions::store::{Persist, MAX_ID, NEXT_ID_FILE};
}

pub mod symbolize {
    pub use crate::process::symbolize::{
        budget, bytes, set_budget, shed, stats, BlazeSymbolizer, Frame, Symbolizer,
    };
}

pub mod sys {
    pub use crate::os::{own_stack, PidFd};
}

pub mod unwind {
    pub use crate::process::unwind::{
        bytes, counters, set_budget, shed, Unwinder, Walk, MAX_FRAMES,
    };
}

pub mod continuous {
    pub use crate::continuous::decode::decode;
    pub use crate::continuous::encode::encode;
    pub use crate::continuous::history::History;
    pub use crate::continuous::Settings;
}

pub mod sinks {
    pub use crate::config::sink_files::Layout as ClickHouseLayout;
    pub use crate::config::sinks::{Kind as SinkKind, SinkEntry};
    pub use crate::continuous::sinks::clickhouse::{
        rows as clickhouse_rows, schema_script as clickhouse_schema,
    };
    pub use crate::continuous::sinks::deliver::Report as SinkReport;
    pub use crate::continuous::sinks::otlp::{
        request as otlp_request, Config as OtlpConfig, Otlp, PROTO_VERSION as OTLP_PROTO_VERSION,
    };
    pub use crate::continuous::sinks::pyroscope::{
        requests as pyroscope_requests, Config as PyroscopeConfig, Ingest as PyroscopeIngest,
        Limits as PyroscopeLimits, Pyroscope,
    };
    pub use crate::continuous::sinks::{
        error_chain, http_client, judge, Auth, DropReason, Failure, Secret, Sent, Sinks,
    };
}
