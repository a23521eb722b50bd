//! The OpenTelemetry OTLP profiles form of continuous windows (proto
//! v1.10.0, a development-stage signal upstream) and the gRPC client that
//! exports them to a collector with `ProfilesService/Export`.
use super::SetupError;
use super::{Auth, DropReason, Failure, Secret, Sent, MAX_DETAIL};
use base64::Engine as _;
use opentelemetry_proto::tonic::collector::profiles::v1development::{
    profiles_service_client::ProfilesServiceClient, ExportProfilesServiceRequest,
};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::profiles::v1development as pb;
use opentelemetry_proto::tonic::resource::v1::Resource;
use profd_common::api;
use prost::Message as _;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;
use tonic::metadata::{AsciiMetadataKey, AsciiMetadataValue, MetadataMap};
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

/// The OTLP profiles proto version this sink speaks (the signal is
/// experimental upstream).
pub const PROTO_VERSION: &str = "v1.10.0";

/// Largest request sent: the default receive limit of gRPC servers, the
/// OpenTelemetry Collector's included. A bigger window goes in parts.
const MAX_REQUEST_BYTES: usize = 4 << 20;

/// Metadata a user may not set: gRPC's own and HTTP/2's.
const RESERVED: [&str; 6] = [
    "content-type",
    "te",
    "connection",
    "transfer-encoding",
    "host",
    "user-agent",
];

/// Where and how the sink exports.
#[derive(Clone, Debug)]
pub struct Config {
    /// The collector's OTLP gRPC endpoint, `http(s)://host:4317`.
    pub url: String,
    /// Sent as `authorization` metadata (`Bearer …` or `Basic …`).
    pub auth: Auth,
    /// Further metadata on every request, e.g. `x-scope-orgid`.
    pub headers: Vec<(String, Secret)>,
    /// Bound on each request, connecting included.
    pub timeout: Duration,
    /// A PEM file of CA certificates trusted besides the system's (https).
    pub ca: Option<PathBuf>,
}

/// An OTLP profiles exporter to one collector.
pub struct Otlp {
    url: String,
    endpoint: Endpoint,
    /// Made on the first send (it needs the runtime), connected on use.
    channel: OnceLock<Channel>,
    metadata: MetadataMap,
    timeout: Duration,
}

impl std::fmt::Debug for Otlp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The metadata holds credentials: it stays out.
        f.debug_struct("Otlp").field("url", &self.url).finish()
    }
}

impl Otlp {
    /// Checks the config (URL, header names valid as gRPC metadata) with an
    /// error naming the field; connects lazily (a down collector is not an
    /// error here).
    pub fn new(c: Config) -> Result<Otlp, SetupError> {
        let endpoint = endpoint(&c)?;
        let mut metadata = MetadataMap::new();
        let authorization = match &c.auth {
            Auth::None => None,
            Auth::Bearer(token) => Some(("auth", format!("Bearer {}", token.expose()))),
            Auth::Basic { user, password } => {
                if user.contains(':') {
                    return Err(SetupError::Setting(format!(
                        "auth: user {user:?} has a ':', which basic authentication cannot carry"
                    )));
                }
                let pair = format!("{user}:{}", password.expose());
                Some((
                    "auth",
                    format!(
                        "Basic {}",
                        base64::engine::general_purpose::STANDARD.encode(pair)
                    ),
                ))
            }
        };
        if let Some((field, value)) = authorization {
            let mut value = AsciiMetadataValue::try_from(value).map_err(|_| {
                format!("{field}: the credential is not visible ASCII: fix its file")
            })?;
            value.set_sensitive(true);
            metadata.insert("authorization", value);
        }
        for (name, value) in &c.headers {
            let key = AsciiMetadataKey::from_bytes(name.as_bytes()).map_err(|_| {
                format!(
                    "headers: {name:?} is not a gRPC metadata name: use letters, digits, '-', \
                     '_' and '.' (not ending in -bin)"
                )
            })?;
            let lower = key.as_str();
            if lower.starts_with("grpc-") || lower.starts_with(':') || RESERVED.contains(&lower) {
                return Err(SetupError::Setting(format!(
                    "headers: {name:?} is set by gRPC itself: remove it"
                )));
            }
            if metadata.contains_key(lower) {
                return Err(SetupError::Setting(match lower {
                    "authorization" => {
                        format!("headers: {name:?} is set by auth already: remove one of them")
                    }
                    _ => format!("headers: {name:?} is given twice: keep one"),
                }));
            }
            let mut value = AsciiMetadataValue::try_from(value.expose()).map_err(|_| {
                format!("headers: the value of {name:?} is not visible ASCII: fix its file")
            })?;
            value.set_sensitive(true);
            metadata.insert(key, value);
        }
        Ok(Otlp {
            url: c.url,
            endpoint,
            channel: OnceLock::new(),
            metadata,
            timeout: c.timeout,
        })
    }

    /// One ProfilesService/Export per window (in parts when the window
    /// exceeds a gRPC server's default 4 MiB message, counted as `split`).
    /// Unavailable, ResourceExhausted, DeadlineExceeded, Aborted, Cancelled
    /// and transport errors are retried; other codes drop the window as
    /// `grpc_<code>`; profiles the collector rejects in a partial success
    /// are counted in `rejected`. A window without stacks sends nothing.
    /// A part sent again after a later part failed carries the same
    /// `profile_id`s, for receivers that deduplicate.
    pub async fn send(&self, w: &api::Window) -> Result<Sent, Failure> {
        let mut client = self.client();
        let parts = requests(w, MAX_REQUEST_BYTES);
        let mut sent = Sent {
            split: parts.len().saturating_sub(1) as u64,
            ..Sent::default()
        };
        for part in parts {
            let bytes = part.encoded_len() as u64;
            let answer = client
                .export(self.request(part))
                .await
                .map_err(|s| judge(&s))?;
            sent.bytes += bytes;
            sent.requests += 1;
            if let Some(p) = answer.into_inner().partial_success {
                if p.rejected_profiles > 0 {
                    sent.rejected += p.rejected_profiles as u64;
                    tracing::warn!(
                        url = %self.url,
                        window = %w.id,
                        rejected = p.rejected_profiles,
                        "the collector rejected profiles: {}",
                        clip(p.error_message)
                    );
                }
            }
        }
        Ok(sent)
    }

    /// The client of the collector's channel (made on first use: it needs
    /// the runtime; connected on use).
    fn client(&self) -> ProfilesServiceClient<Channel> {
        let channel = self.channel.get_or_init(|| self.endpoint.connect_lazy());
        ProfilesServiceClient::new(channel.clone())
    }

    /// An Export call with the sink's metadata and timeout.
    fn request(
        &self,
        body: ExportProfilesServiceRequest,
    ) -> tonic::Request<ExportProfilesServiceRequest> {
        let mut request = tonic::Request::new(body);
        *request.metadata_mut() = self.metadata.clone();
        request.set_timeout(self.timeout);
        request
    }

    /// Check the collector now: an empty Export (which OTLP allows) with
    /// the sink's metadata must be taken.
    pub async fn probe(&self) -> Result<String, ProbeError> {
        let request = self.request(ExportProfilesServiceRequest::default());
        let url = self.url.clone();
        match self.client().export(request).await {
            Ok(_) => Ok(format!("OTLP profiles {PROTO_VERSION} collector")),
            Err(s) => Err(match s.code() {
                tonic::Code::Unauthenticated | tonic::Code::PermissionDenied => {
                    ProbeError::Credentials { url, status: s }
                }
                tonic::Code::Unimplemented => ProbeError::NoService { url },
                _ => ProbeError::Export { url, status: s },
            }),
        }
    }
}

/// Why an OTLP collector cannot be used, as a check of it found (`status`:
/// its answer).
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("{url} refuses the credentials: {}", clip(.status.message().to_string()))]
    Credentials { url: String, status: tonic::Status },
    #[error("{url} has no OTLP profiles service: enable the profiles signal in the collector's OTLP receiver")]
    NoService { url: String },
    #[error("cannot export to {url}: {}", judge(.status))]
    Export { url: String, status: tonic::Status },
}

/// The endpoint of `c.url`, with its TLS and timeouts.
fn endpoint(c: &Config) -> Result<Endpoint, SetupError> {
    let e = Endpoint::from_shared(c.url.clone())
        .map_err(|e| format!("url: {:?} is not a URL: {e}", c.url))?;
    let uri = e.uri();
    let tls = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        _ => {
            return Err(SetupError::Setting(format!(
                "url: {:?} needs http:// or https://, e.g. http://collector:4317",
                c.url
            )))
        }
    };
    match uri.authority() {
        None => {
            return Err(SetupError::Setting(format!(
                "url: {:?} names no host",
                c.url
            )))
        }
        Some(a) if a.as_str().contains('@') => {
            return Err("url: has credentials in it: put them in a file and give it as auth".into())
        }
        Some(_) => {}
    }
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        return Err(SetupError::Setting(format!(
            "url: {:?} has a path: gRPC sets its own, give only scheme://host:port",
            c.url
        )));
    }
    if c.timeout.is_zero() {
        return Err("timeout: must be above 0".into());
    }
    let mut e = e
        .timeout(c.timeout)
        .connect_timeout(c.timeout.min(Duration::from_secs(10)))
        .user_agent(format!("profd/{}", env!("CARGO_PKG_VERSION")))
        .map_err(|e| format!("user agent: {e}"))?;
    if tls {
        let mut config = ClientTlsConfig::new().with_native_roots();
        if let Some(ca) = &c.ca {
            let pem = crate::trusted_files::read(ca).map_err(|e| format!("ca: {e}"))?;
            // Checked here: tonic reads the file only when it connects.
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| format!("ca: {}: not PEM certificates: {e}", ca.display()))?;
            if certs.is_empty() {
                return Err(SetupError::Setting(format!(
                    "ca: {}: no certificate in it",
                    ca.display()
                )));
            }
            config = config.ca_certificate(tonic::transport::Certificate::from_pem(pem));
        }
        e = e
            .tls_config(config)
            .map_err(|e| format!("url: cannot set up TLS for {:?}: {e}", c.url))?;
    } else if let Some(ca) = &c.ca {
        return Err(SetupError::Setting(format!(
            "ca: {} is given but url {:?} is plain http: use https://",
            ca.display(),
            c.url
        )));
    }
    Ok(e)
}

/// A gRPC error judged: codes that say "later" are retried, others drop
/// the window, counted as `grpc_<code in snake case>`.
fn judge(status: &tonic::Status) -> Failure {
    use tonic::Code;
    let detail = clip(format!("{}: {}", status.code(), status.message()));
    match status.code() {
        Code::Unavailable
        | Code::ResourceExhausted
        | Code::DeadlineExceeded
        | Code::Aborted
        | Code::Cancelled => Failure::Retry(detail),
        // The client could not get a connection ready: tonic reports it as
        // Unknown, with the transport error as its source.
        Code::Unknown if transport(status) => Failure::Retry(detail),
        code => Failure::Drop {
            reason: DropReason::Grpc(code as i32),
            detail,
        },
    }
}

/// `status` comes from the connection, not from the server.
fn transport(status: &tonic::Status) -> bool {
    let mut source = std::error::Error::source(status);
    while let Some(e) = source {
        if e.is::<tonic::transport::Error>() || e.is::<std::io::Error>() {
            return true;
        }
        source = e.source();
    }
    status.message().starts_with("Service was not ready")
}

/// `s` cut to the detail kept for a log.
fn clip(mut s: String) -> String {
    if s.len() > MAX_DETAIL {
        let mut end = MAX_DETAIL;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push('…');
    }
    s
}

/// Pure: the Export request for a window (all of it, however big).
pub fn request(w: &api::Window) -> ExportProfilesServiceRequest {
    build(w, &whole(w))
}

/// A part of a window: stacks of services, by index.
type Part = Vec<(usize, Range<usize>)>;

/// Every service of `w` with stacks, whole.
fn whole(w: &api::Window) -> Part {
    w.services
        .iter()
        .enumerate()
        .filter(|(_, s)| !s.stacks.is_empty())
        .map(|(i, s)| (i, 0..s.stacks.len()))
        .collect()
}

/// The Export requests for a window, each encoded in at most `max` bytes
/// where it can be. A window too big is cut into as many parts of about
/// equal stacks as its size asks (and a quarter more, as parts share less
/// of the dictionary), and a part still too big is halved until it fits.
/// None for a window without stacks.
fn requests(w: &api::Window, max: usize) -> Vec<ExportProfilesServiceRequest> {
    let all = whole(w);
    if all.is_empty() {
        return Vec::new();
    }
    let first = build(w, &all);
    let len = first.encoded_len();
    if len <= max {
        return vec![first];
    }
    drop(first);
    let k = (len.div_ceil(max.max(1)) * 5).div_ceil(4);
    let mut out = Vec::new();
    // Parts still to build, in order (the next one last).
    let mut todo: Vec<Part> = cut(&all, k).into_iter().rev().collect();
    while let Some(part) = todo.pop() {
        let r = build(w, &part);
        if r.encoded_len() <= max {
            out.push(r);
            continue;
        }
        match halve(&part) {
            Some((a, b)) => {
                todo.push(b);
                todo.push(a);
            }
            // One stack: as small as it gets.
            None => out.push(r),
        }
    }
    out
}

/// `part` in `k` parts of about as many stacks each, in order (a service's
/// stacks may straddle two parts).
fn cut(part: &Part, k: usize) -> Vec<Part> {
    let stacks: usize = part.iter().map(|(_, r)| r.len()).sum();
    let per = stacks.div_ceil(k.max(1)).max(1);
    let mut out: Vec<Part> = vec![Vec::new()];
    let mut room = per;
    for (service, range) in part {
        let mut at = range.start;
        while at < range.end {
            if room == 0 {
                out.push(Vec::new());
                room = per;
            }
            let end = range.end.min(at + room);
            out.last_mut().expect("a part").push((*service, at..end));
            room -= end - at;
            at = end;
        }
    }
    out
}

fn halve(part: &Part) -> Option<(Part, Part)> {
    if part.len() > 1 {
        let (a, b) = part.split_at(part.len() / 2);
        return Some((a.to_vec(), b.to_vec()));
    }
    let (service, range) = part.first()?.clone();
    if range.len() < 2 {
        return None;
    }
    let mid = range.start + range.len() / 2;
    Some((
        vec![(service, range.start..mid)],
        vec![(service, mid..range.end)],
    ))
}

/// An attribute's value, as kept in the dictionary's index.
#[derive(Clone, PartialEq, Eq, Hash)]
enum Value {
    Int(i64),
    Str(String),
}

/// A location: its mapping, address, and lines (function, line number).
type LocationKey = (i32, u64, Vec<(i32, i64)>);

/// The request's shared dictionary, each table with its zero value at [0]
/// and an index to find entries again.
struct Dictionary {
    d: pb::ProfilesDictionary,
    strings: HashMap<String, i32>,
    attributes: HashMap<(i32, Value), i32>,
    functions: HashMap<(i32, i32), i32>,
    mappings: HashMap<(i32, i32), i32>,
    locations: HashMap<LocationKey, i32>,
    stacks: HashMap<Vec<i32>, i32>,
}

/// `len` as a table index (tables stay far below 2^31 entries: a window
/// holds at most a few hundred thousand stacks).
fn index(len: usize) -> i32 {
    i32::try_from(len).unwrap_or(i32::MAX)
}

impl Dictionary {
    fn new() -> Dictionary {
        let d = pb::ProfilesDictionary {
            mapping_table: vec![pb::Mapping::default()],
            location_table: vec![pb::Location::default()],
            function_table: vec![pb::Function::default()],
            link_table: vec![pb::Link::default()],
            string_table: vec![String::new()],
            attribute_table: vec![pb::KeyValueAndUnit::default()],
            stack_table: vec![pb::Stack::default()],
        };
        Dictionary {
            d,
            strings: HashMap::from([(String::new(), 0)]),
            attributes: HashMap::new(),
            functions: HashMap::new(),
            mappings: HashMap::new(),
            locations: HashMap::new(),
            stacks: HashMap::new(),
        }
    }

    fn string(&mut self, s: &str) -> i32 {
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let i = index(self.d.string_table.len());
        self.d.string_table.push(s.to_string());
        self.strings.insert(s.to_string(), i);
        i
    }

    fn attribute(&mut self, key: &str, value: Value) -> i32 {
        let key = self.string(key);
        if let Some(&i) = self.attributes.get(&(key, value.clone())) {
            return i;
        }
        let i = index(self.d.attribute_table.len());
        self.d.attribute_table.push(pb::KeyValueAndUnit {
            key_strindex: key,
            value: Some(any(&value)),
            unit_strindex: 0,
        });
        self.attributes.insert((key, value), i);
        i
    }

    /// A window's function (or a placeholder for an index past the table).
    fn function(&mut self, f: Option<&api::WindowFunction>) -> i32 {
        let (name, file) = match f {
            Some(f) => (self.string(&f.name), self.string(&f.file)),
            None => (self.string("[unknown]"), 0),
        };
        if let Some(&i) = self.functions.get(&(name, file)) {
            return i;
        }
        let i = index(self.d.function_table.len());
        // Windows hold demangled names only: the system name is the same.
        self.d.function_table.push(pb::Function {
            name_strindex: name,
            system_name_strindex: name,
            filename_strindex: file,
            start_line: 0,
        });
        self.functions.insert((name, file), i);
        i
    }

    /// The mapping of a module (0 when unknown), with its GNU build id
    /// when known: a process's executable's, or that of a module with code
    /// its host could not name.
    fn mapping(&mut self, module: &str, build_id: &str) -> i32 {
        if module.is_empty() {
            return 0;
        }
        let file = self.string(module);
        let id = match build_id {
            "" => 0,
            id => self.attribute("process.executable.build_id.gnu", Value::Str(id.into())),
        };
        if let Some(&i) = self.mappings.get(&(file, id)) {
            return i;
        }
        let i = index(self.d.mapping_table.len());
        self.d.mapping_table.push(pb::Mapping {
            filename_strindex: file,
            attribute_indices: if id == 0 { Vec::new() } else { vec![id] },
            ..Default::default()
        });
        self.mappings.insert((file, id), i);
        i
    }

    fn location(&mut self, mapping: i32, address: u64, lines: Vec<(i32, i64)>) -> i32 {
        let key = (mapping, address, lines);
        if let Some(&i) = self.locations.get(&key) {
            return i;
        }
        let i = index(self.d.location_table.len());
        self.d.location_table.push(pb::Location {
            mapping_index: mapping,
            address,
            lines: key
                .2
                .iter()
                .map(|&(function_index, line)| pb::Line {
                    function_index,
                    line,
                    column: 0,
                })
                .collect(),
            attribute_indices: Vec::new(),
        });
        self.locations.insert(key, i);
        i
    }

    fn stack(&mut self, locations: Vec<i32>) -> i32 {
        if locations.is_empty() {
            return 0;
        }
        if let Some(&i) = self.stacks.get(&locations) {
            return i;
        }
        let i = index(self.d.stack_table.len());
        self.d.stack_table.push(pb::Stack {
            location_indices: locations.clone(),
        });
        self.stacks.insert(locations, i);
        i
    }
}

fn any(v: &Value) -> AnyValue {
    AnyValue {
        value: Some(match v {
            Value::Int(i) => any_value::Value::IntValue(*i),
            Value::Str(s) => any_value::Value::StringValue(s.clone()),
        }),
    }
}

fn key_value(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(any(&Value::Str(value.into()))),
        key_strindex: 0,
    }
}

/// A stable id for the profile of `service`'s stacks from `first` in window
/// `id`: the same part of the same window sent again has the same id.
fn profile_id(id: &str, service: &str, first: usize) -> Vec<u8> {
    let mut h = Sha256::new();
    h.update(id.as_bytes());
    h.update([0]);
    h.update(service.as_bytes());
    h.update([0]);
    h.update((first as u64).to_le_bytes());
    h.finalize()[..16].to_vec()
}

/// The file name of a path.
fn base_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// The request for `part` of `w`: a ResourceProfiles per service (its
/// `service.name`, the host), holding one profile of its stacks.
fn build(w: &api::Window, part: &Part) -> ExportProfilesServiceRequest {
    let mut d = Dictionary::new();
    let mut resource_profiles = Vec::with_capacity(part.len());
    for (si, range) in part {
        let s = &w.services[*si];
        let profile = profile(w, s, range.clone(), &mut d);
        let mut attributes = vec![
            key_value("service.name", &s.service),
            key_value("host.name", &w.host),
            key_value("os.type", "linux"),
        ];
        if !w.kernel_release.is_empty() {
            attributes.push(key_value("os.version", &w.kernel_release));
        }
        resource_profiles.push(pb::ResourceProfiles {
            resource: Some(Resource {
                attributes,
                dropped_attributes_count: 0,
                entity_refs: Vec::new(),
            }),
            scope_profiles: vec![pb::ScopeProfiles {
                scope: Some(InstrumentationScope {
                    name: "profd".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    attributes: Vec::new(),
                    dropped_attributes_count: 0,
                }),
                profiles: vec![profile],
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        });
    }
    ExportProfilesServiceRequest {
        resource_profiles,
        dictionary: Some(d.d),
    }
}

/// The profile of stacks `range` of service `s`: a sample per stack and
/// thread (stacks that come out the same are merged), counts as values.
fn profile(
    w: &api::Window,
    s: &api::ServiceWindow,
    range: Range<usize>,
    d: &mut Dictionary,
) -> pb::Profile {
    let threads: HashMap<u32, &api::WindowThread> = s.threads.iter().map(|t| (t.tid, t)).collect();
    let processes: HashMap<u32, &api::WindowProcess> =
        s.processes.iter().map(|p| (p.pid, p)).collect();
    let mut functions: Vec<Option<i32>> = vec![None; s.functions.len()];
    // The build ids of modules with code their host could not name.
    let mut module_ids: HashMap<&str, &str> = HashMap::new();
    for f in s.functions.iter().filter(|f| !f.build_id.is_empty()) {
        module_ids
            .entry(f.module.as_str())
            .or_insert(f.build_id.as_str());
    }
    // Each thread's attributes, sorted (a sample's identity is their set),
    // and its process's executable and build id.
    let mut thread_info: HashMap<u32, (Vec<i32>, &str, &str)> = HashMap::new();
    let mut merged: HashMap<(i32, Vec<i32>), usize> = HashMap::new();
    let mut samples: Vec<pb::Sample> = Vec::new();
    let first = range.start;
    for stack in &s.stacks[range] {
        let (attributes, exe, build_id) = thread_info
            .entry(stack.tid)
            .or_insert_with(|| {
                let thread = threads.get(&stack.tid);
                let pid = thread.map_or(0, |t| t.pid);
                let process = processes.get(&pid);
                let mut a = vec![
                    d.attribute("process.pid", Value::Int(pid.into())),
                    d.attribute("thread.id", Value::Int(stack.tid.into())),
                ];
                let mut text = |key: &str, value: &str| {
                    if !value.is_empty() {
                        a.push(d.attribute(key, Value::Str(value.into())));
                    }
                };
                text("thread.name", thread.map_or("", |t| t.name.as_str()));
                if let Some(p) = process {
                    // The executable's file name (semconv), else the
                    // command name when the executable is unknown.
                    let name = match p.executable.as_str() {
                        "" => p.comm.as_str(),
                        exe => base_name(exe),
                    };
                    text("process.executable.name", name);
                    text("process.executable.path", &p.executable);
                    text("container.id", &p.container_id);
                    // The Kubernetes semantic conventions' names.
                    if let Some(pod) = &p.pod {
                        text("k8s.namespace.name", &pod.namespace);
                        text("k8s.pod.name", &pod.name);
                        text("k8s.pod.uid", &pod.uid);
                        text("k8s.container.name", &pod.container);
                    }
                }
                a.sort_unstable();
                a.dedup();
                let exe = process.map_or("", |p| base_name(&p.executable));
                let build_id = process.map_or("", |p| p.build_id.as_str());
                (a, exe, build_id)
            })
            .clone();
        let inlined = |f: u32| s.functions.get(f as usize).is_some_and(|f| f.inlined);
        let address = |i: usize| stack.address.get(i).copied().unwrap_or(0);
        // Frames innermost first: a run of inlined frames at the address of
        // the frame they were inlined into is one location, its lines
        // innermost first as well.
        let mut locations = Vec::new();
        let mut i = 0;
        while i < stack.function.len() {
            let start = i;
            while i + 1 < stack.function.len()
                && inlined(stack.function[i])
                && address(i + 1) == address(i)
            {
                i += 1;
            }
            let lines: Vec<(i32, i64)> = (start..=i)
                .map(|k| {
                    let line = stack.line.get(k).copied().unwrap_or(0);
                    let f = stack.function[k];
                    (function(d, &mut functions, s, f), i64::from(line))
                })
                .collect();
            let module = s
                .functions
                .get(stack.function[i] as usize)
                .map_or("", |f| f.module.as_str());
            let id = match !exe.is_empty() && module == exe {
                true => build_id,
                false => module_ids.get(module).copied().unwrap_or(""),
            };
            let mapping = d.mapping(module, id);
            locations.push(d.location(mapping, address(i), lines));
            i += 1;
        }
        let stack_index = d.stack(locations);
        let count = i64::try_from(stack.count).unwrap_or(i64::MAX);
        match merged.get(&(stack_index, attributes.clone())) {
            Some(&at) => samples[at].values[0] = samples[at].values[0].saturating_add(count),
            None => {
                merged.insert((stack_index, attributes.clone()), samples.len());
                samples.push(pb::Sample {
                    stack_index,
                    attribute_indices: attributes,
                    link_index: 0,
                    values: vec![count],
                    timestamps_unix_nano: Vec::new(),
                });
            }
        }
    }
    let value_type = |d: &mut Dictionary, kind: &str, unit: &str| pb::ValueType {
        type_strindex: d.string(kind),
        unit_strindex: d.string(unit),
    };
    pb::Profile {
        sample_type: Some(value_type(d, "samples", "count")),
        samples,
        time_unix_nano: w.start_unix_ns,
        duration_nano: w.end_unix_ns.saturating_sub(w.start_unix_ns),
        period_type: Some(value_type(d, "cpu", "nanoseconds")),
        period: match w.frequency_hz {
            0 => 0,
            hz => 1_000_000_000 / i64::from(hz),
        },
        profile_id: profile_id(&w.id, &s.service, first),
        dropped_attributes_count: 0,
        original_payload_format: String::new(),
        original_payload: Vec::new(),
        attribute_indices: Vec::new(),
    }
}

/// The dictionary's function for function `f` of service `s`, remembered
/// in `known` (by the service's index).
fn function(d: &mut Dictionary, known: &mut [Option<i32>], s: &api::ServiceWindow, f: u32) -> i32 {
    match known.get_mut(f as usize) {
        Some(Some(i)) => *i,
        Some(slot) => {
            let i = d.function(s.functions.get(f as usize));
            *slot = Some(i);
            i
        }
        None => d.function(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window() -> api::Window {
        let f = |name: &str, inlined: bool| api::WindowFunction {
            name: name.into(),
            module: "web".into(),
            file: format!("{name}.rs"),
            inlined,
            ..Default::default()
        };
        api::Window {
            id: "0123456789abcdef0123456789abcdef".into(),
            start_unix_ns: 10_000_000_000,
            end_unix_ns: 20_000_000_000,
            host: "h1".into(),
            kernel_release: "6.1.0".into(),
            frequency_hz: 19,
            services: vec![
                api::ServiceWindow {
                    service: "web.service".into(),
                    totals: None,
                    source: api::ServiceSource::Unit as i32,
                    samples: 9,
                    processes: vec![api::WindowProcess {
                        pid: 7,
                        comm: "web".into(),
                        executable: "/usr/bin/web".into(),
                        build_id: "abcd".into(),
                        ..Default::default()
                    }],
                    threads: vec![
                        api::WindowThread {
                            tid: 7,
                            pid: 7,
                            name: "web".into(),
                            samples: 6,
                        },
                        api::WindowThread {
                            tid: 8,
                            pid: 7,
                            name: "worker".into(),
                            samples: 3,
                        },
                    ],
                    // 0 is inlined into 1 (same address); 1 called by 2.
                    functions: vec![f("inl", true), f("outer", false), f("main", false)],
                    stacks: vec![
                        api::WindowStack {
                            tid: 7,
                            function: vec![0, 1, 2],
                            line: vec![3, 30, 300],
                            address: vec![0x10, 0x10, 0x20],
                            count: 4,
                        },
                        api::WindowStack {
                            tid: 8,
                            function: vec![1, 2],
                            line: vec![31, 300],
                            address: vec![0x11, 0x20],
                            count: 3,
                        },
                        // The same stack and thread again: merged.
                        api::WindowStack {
                            tid: 7,
                            function: vec![0, 1, 2],
                            line: vec![3, 30, 300],
                            address: vec![0x10, 0x10, 0x20],
                            count: 2,
                        },
                    ],
                },
                api::ServiceWindow {
                    service: "db.service".into(),
                    totals: None,
                    source: api::ServiceSource::Unit as i32,
                    samples: 5,
                    processes: vec![api::WindowProcess {
                        pid: 20,
                        comm: "db".into(),
                        ..Default::default()
                    }],
                    threads: vec![api::WindowThread {
                        tid: 20,
                        pid: 20,
                        name: "db".into(),
                        samples: 5,
                    }],
                    functions: vec![f("main", false)],
                    stacks: vec![api::WindowStack {
                        tid: 20,
                        function: vec![0],
                        line: vec![300],
                        address: vec![0x20],
                        count: 5,
                    }],
                },
                // No stacks: no profile.
                api::ServiceWindow {
                    service: "idle.service".into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        }
    }

    fn text(d: &pb::ProfilesDictionary, i: i32) -> &str {
        &d.string_table[i as usize]
    }

    /// A sample's frames, innermost first, as `name:line`.
    fn frames(d: &pb::ProfilesDictionary, s: &pb::Sample) -> Vec<String> {
        d.stack_table[s.stack_index as usize]
            .location_indices
            .iter()
            .flat_map(|&l| &d.location_table[l as usize].lines)
            .map(|l| {
                let f = &d.function_table[l.function_index as usize];
                format!("{}:{}", text(d, f.name_strindex), l.line)
            })
            .collect()
    }

    /// A sample's attributes as `key=value`.
    fn attributes(d: &pb::ProfilesDictionary, s: &pb::Sample) -> Vec<String> {
        s.attribute_indices
            .iter()
            .map(|&a| {
                let a = &d.attribute_table[a as usize];
                let value = match a.value.as_ref().and_then(|v| v.value.as_ref()) {
                    Some(any_value::Value::IntValue(i)) => i.to_string(),
                    Some(any_value::Value::StringValue(s)) => s.clone(),
                    other => panic!("{other:?}"),
                };
                format!("{}={value}", text(d, a.key_strindex))
            })
            .collect()
    }

    /// Interpreter frames as the daemon puts them in windows (module
    /// `[python]`, `[ruby]`, `[perl]`, no address, the source file and
    /// line) reach the collector one location each, named and lined as
    /// sent, though they share the address 0.
    #[test]
    fn interpreter_frames_keep_their_names_and_lines() {
        let mut w = window();
        w.services.truncate(1);
        let s = &mut w.services[0];
        s.functions = [
            ("py_split.hot_a", "[python]"),
            ("py_split.hot_b", "[python]"),
            ("py_split.outer", "[python]"),
            ("block in Work#outer", "[ruby]"),
            ("Work::hot_a", "[perl]"),
        ]
        .iter()
        .map(|(name, module)| api::WindowFunction {
            name: name.to_string(),
            module: module.to_string(),
            file: "/srv/work".into(),
            ..Default::default()
        })
        .collect();
        let at = |function: Vec<u32>, line: Vec<u32>, count: u64| api::WindowStack {
            tid: 7,
            address: vec![0; function.len()],
            function,
            line,
            count,
        };
        s.stacks = vec![
            at(vec![0, 2], vec![21, 35], 3),
            at(vec![1, 2], vec![27, 36], 1),
            at(vec![4, 3], vec![5, 9], 2),
        ];
        s.samples = 6;
        let r = request(&w);
        let d = r.dictionary.as_ref().unwrap();
        let p = &r.resource_profiles[0].scope_profiles[0].profiles[0];
        let mut got: Vec<(Vec<String>, Vec<i64>)> = (p.samples.iter())
            .map(|s| (frames(d, s), s.values.clone()))
            .collect();
        got.sort();
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            got,
            [
                (names(&["Work::hot_a:5", "block in Work#outer:9"]), vec![2]),
                (names(&["py_split.hot_a:21", "py_split.outer:35"]), vec![3]),
                (names(&["py_split.hot_b:27", "py_split.outer:36"]), vec![1]),
            ]
        );
    }

    #[test]
    fn every_table_starts_with_its_zero_value() {
        let r = request(&window());
        let d = r.dictionary.unwrap();
        assert_eq!(d.mapping_table[0], pb::Mapping::default());
        assert_eq!(d.location_table[0], pb::Location::default());
        assert_eq!(d.function_table[0], pb::Function::default());
        assert_eq!(d.link_table, vec![pb::Link::default()]);
        assert_eq!(d.string_table[0], "");
        assert_eq!(d.attribute_table[0], pb::KeyValueAndUnit::default());
        assert_eq!(d.stack_table[0], pb::Stack::default());
        // No entry but [0] is a zero value, and none is there twice.
        for (i, s) in d.string_table.iter().enumerate().skip(1) {
            assert!(!s.is_empty());
            assert_eq!(d.string_table.iter().position(|t| t == s), Some(i));
        }
        assert!(d.stack_table[1..]
            .iter()
            .all(|s| !s.location_indices.is_empty()));
        assert!(d.function_table[1..].iter().all(|f| f.name_strindex != 0));
    }

    #[test]
    fn a_profile_per_service_with_its_resource_and_period() {
        let r = request(&window());
        let d = r.dictionary.as_ref().unwrap();
        assert_eq!(
            r.resource_profiles.len(),
            2,
            "the service without stacks is left out"
        );
        let resource: Vec<(String, String)> = r.resource_profiles[0]
            .resource
            .as_ref()
            .unwrap()
            .attributes
            .iter()
            .map(
                |kv| match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                    Some(any_value::Value::StringValue(s)) => (kv.key.clone(), s.clone()),
                    other => panic!("{other:?}"),
                },
            )
            .collect();
        let pair = |k: &str, v: &str| (k.to_string(), v.to_string());
        assert_eq!(
            resource,
            vec![
                pair("service.name", "web.service"),
                pair("host.name", "h1"),
                pair("os.type", "linux"),
                pair("os.version", "6.1.0"),
            ]
        );
        let scope = &r.resource_profiles[0].scope_profiles[0];
        assert_eq!(scope.scope.as_ref().unwrap().name, "profd");
        let p = &scope.profiles[0];
        let st = p.sample_type.unwrap();
        assert_eq!(
            (text(d, st.type_strindex), text(d, st.unit_strindex)),
            ("samples", "count")
        );
        let pt = p.period_type.unwrap();
        assert_eq!(
            (text(d, pt.type_strindex), text(d, pt.unit_strindex)),
            ("cpu", "nanoseconds")
        );
        assert_eq!(p.period, 1_000_000_000 / 19);
        assert_eq!(p.time_unix_nano, 10_000_000_000);
        assert_eq!(p.duration_nano, 10_000_000_000);
        assert_eq!(p.profile_id.len(), 16);
        let other = &r.resource_profiles[1].scope_profiles[0].profiles[0];
        assert_ne!(p.profile_id, other.profile_id);
        assert_eq!(
            request(&window()),
            r,
            "the same window gives the same request"
        );
    }

    #[test]
    fn stacks_are_leaf_first_with_inlined_lines_and_counts_merged() {
        let w = window();
        let r = request(&w);
        let d = r.dictionary.as_ref().unwrap();
        let web = &r.resource_profiles[0].scope_profiles[0].profiles[0];
        assert_eq!(web.samples.len(), 2, "the repeated stack is merged");
        let total: i64 = web
            .samples
            .iter()
            .map(|s| s.values.iter().sum::<i64>())
            .sum();
        assert_eq!(total as u64, w.services[0].samples);
        let s0 = &web.samples[0];
        assert_eq!(s0.values, vec![6]);
        assert!(s0.timestamps_unix_nano.is_empty());
        assert_eq!(frames(d, s0), ["inl:3", "outer:30", "main:300"]);
        // The inlined frame and its caller are one location, innermost line
        // first; the stack has two locations, the leaf first.
        let stack = &d.stack_table[s0.stack_index as usize].location_indices;
        assert_eq!(stack.len(), 2);
        let leaf = &d.location_table[stack[0] as usize];
        assert_eq!(leaf.address, 0x10);
        assert_eq!(leaf.lines.len(), 2);
        let mapping = &d.mapping_table[leaf.mapping_index as usize];
        assert_eq!(text(d, mapping.filename_strindex), "web");
        let build_id = &d.attribute_table[mapping.attribute_indices[0] as usize];
        assert_eq!(
            text(d, build_id.key_strindex),
            "process.executable.build_id.gnu"
        );
        assert_eq!(
            attributes(d, s0),
            [
                "process.pid=7",
                "thread.id=7",
                "thread.name=web",
                "process.executable.name=web",
                "process.executable.path=/usr/bin/web"
            ]
        );
        let s1 = &web.samples[1];
        assert_eq!(s1.values, vec![3]);
        assert_eq!(frames(d, s1), ["outer:31", "main:300"]);
        assert!(attributes(d, s1).contains(&"thread.id=8".to_string()));
        assert!(attributes(d, s1).contains(&"thread.name=worker".to_string()));
        // The dictionary is shared: db's `main` is web's `main` function
        // (same name and file), at another location: web's executable has
        // a build id, db's does not, so their mappings differ.
        let db = &r.resource_profiles[1].scope_profiles[0].profiles[0];
        assert_eq!(db.samples.len(), 1);
        assert_eq!(db.samples[0].values, vec![5]);
        assert_eq!(frames(d, &db.samples[0]), ["main:300"]);
        let main = |s: &pb::Sample| {
            let stack = &d.stack_table[s.stack_index as usize].location_indices;
            let location = &d.location_table[*stack.last().unwrap() as usize];
            (location.lines[0].function_index, location.mapping_index)
        };
        let (web_main, web_mapping) = main(s0);
        let (db_main, db_mapping) = main(&db.samples[0]);
        assert_eq!(web_main, db_main);
        assert_ne!(web_mapping, db_mapping);
        assert!(d.mapping_table[db_mapping as usize]
            .attribute_indices
            .is_empty());
    }

    /// A process in a Kubernetes pod: its samples carry the semantic
    /// conventions' k8s attributes.
    #[test]
    fn a_process_in_a_pod_carries_the_k8s_attributes() {
        let mut w = window();
        w.services[1].processes[0].pod = Some(api::KubernetesPod {
            namespace: "shop".into(),
            name: "db-0".into(),
            uid: "0b6e3a4c-1d2f-4e5a-9b8c-7d6e5f4a3b2c".into(),
            container: "postgres".into(),
        });
        let r = request(&w);
        let d = r.dictionary.as_ref().unwrap();
        let db = &r.resource_profiles[1].scope_profiles[0].profiles[0];
        let a = attributes(d, &db.samples[0]);
        for want in [
            "k8s.namespace.name=shop",
            "k8s.pod.name=db-0",
            "k8s.pod.uid=0b6e3a4c-1d2f-4e5a-9b8c-7d6e5f4a3b2c",
            "k8s.container.name=postgres",
        ] {
            assert!(a.contains(&want.to_string()), "{want}: {a:?}");
        }
        let web = &r.resource_profiles[0].scope_profiles[0].profiles[0];
        assert!(!attributes(d, &web.samples[0])
            .iter()
            .any(|a| a.starts_with("k8s.")));
    }

    #[test]
    fn a_big_window_goes_in_parts_that_hold_every_sample() {
        let w = window();
        let whole = request(&w).encoded_len();
        let parts = requests(&w, whole / 2);
        assert!(parts.len() >= 2, "{}", parts.len());
        let mut by_service: HashMap<String, i64> = HashMap::new();
        let mut ids = std::collections::HashSet::new();
        for r in &parts {
            for rp in &r.resource_profiles {
                let name = match &rp.resource.as_ref().unwrap().attributes[0].value {
                    Some(AnyValue {
                        value: Some(any_value::Value::StringValue(s)),
                    }) => s.clone(),
                    other => panic!("{other:?}"),
                };
                let p = &rp.scope_profiles[0].profiles[0];
                assert!(ids.insert(p.profile_id.clone()), "profile ids are unique");
                *by_service.entry(name).or_default() +=
                    p.samples.iter().map(|s| s.values[0]).sum::<i64>();
            }
        }
        assert_eq!(by_service["web.service"], 9);
        assert_eq!(by_service["db.service"], 5);
        assert!(requests(&api::Window::default(), 100).is_empty());
        let all = super::whole(&w);
        let parts = cut(&all, 3);
        assert_eq!(parts, vec![vec![(0, 0..2)], vec![(0, 2..3), (1, 0..1)]]);
        assert_eq!(cut(&all, 1), vec![all.clone()]);
        assert_eq!(cut(&all, 9).len(), 4);
    }

    #[test]
    fn configs_are_checked_field_by_field() {
        let config = |url: &str| Config {
            url: url.into(),
            auth: Auth::None,
            headers: Vec::new(),
            timeout: Duration::from_secs(5),
            ca: None,
        };
        assert!(Otlp::new(config("http://127.0.0.1:4317")).is_ok());
        for (url, says) in [
            ("127.0.0.1:4317", "url: "),
            ("ftp://h:4317", "http:// or https://"),
            ("http://h:4317/v1/profiles", "has a path"),
            ("http://u:p@h:4317", "credentials"),
            ("not a url", "url: "),
        ] {
            let e = Otlp::new(config(url)).unwrap_err().to_string();
            assert!(e.starts_with("url: ") && e.contains(says), "{url}: {e}");
        }
        let dir = std::env::temp_dir().join(format!("profd-otlp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("v");
        std::fs::write(&file, "tenant-1\n").unwrap();
        let secret = Secret::read(&file).unwrap();
        let with = |name: &str| Config {
            headers: vec![(name.into(), secret.clone())],
            ..config("http://h:4317")
        };
        assert!(Otlp::new(with("X-Scope-OrgID")).is_ok());
        for (name, says) in [
            ("bad name", "not a gRPC metadata name"),
            ("x-trace-bin", "not a gRPC metadata name"),
            ("grpc-timeout", "set by gRPC"),
            ("content-type", "set by gRPC"),
        ] {
            let e = Otlp::new(with(name)).unwrap_err().to_string();
            assert!(
                e.starts_with("headers: ") && e.contains(says),
                "{name}: {e}"
            );
        }
        let twice = Config {
            auth: Auth::Bearer(secret.clone()),
            ..with("authorization")
        };
        assert!(Otlp::new(twice)
            .unwrap_err()
            .to_string()
            .contains("set by auth already"));
        let ca = Config {
            ca: Some(file.clone()),
            ..config("https://h:4317")
        };
        let e = Otlp::new(ca).unwrap_err().to_string();
        assert!(e.starts_with("ca: ") && e.contains("no certificate"), "{e}");
        let plain = Config {
            ca: Some(file.clone()),
            ..config("http://h:4317")
        };
        assert!(Otlp::new(plain)
            .unwrap_err()
            .to_string()
            .contains("plain http"));
        let otlp = Otlp::new(Config {
            auth: Auth::Bearer(secret),
            ..config("http://h:4317")
        })
        .unwrap();
        assert!(!format!("{otlp:?}").contains("tenant-1"));
        let basic = Otlp::new(Config {
            auth: Auth::Basic {
                user: "user".into(),
                password: Secret::read(&file).unwrap(),
            },
            ..config("http://h:4317")
        })
        .unwrap();
        // base64("user:tenant-1")
        assert_eq!(
            basic.metadata.get("authorization").unwrap(),
            "Basic dXNlcjp0ZW5hbnQtMQ=="
        );
        let colon = Config {
            auth: Auth::Basic {
                user: "a:b".into(),
                password: Secret::read(&file).unwrap(),
            },
            ..config("http://h:4317")
        };
        assert!(Otlp::new(colon)
            .unwrap_err()
            .to_string()
            .starts_with("auth: "));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn grpc_codes_are_judged() {
        use tonic::{Code, Status};
        for code in [
            Code::Unavailable,
            Code::ResourceExhausted,
            Code::DeadlineExceeded,
            Code::Aborted,
            Code::Cancelled,
        ] {
            assert!(
                matches!(judge(&Status::new(code, "x")), Failure::Retry(_)),
                "{code:?}"
            );
        }
        for (code, reason) in [
            (Code::InvalidArgument, "grpc_invalid_argument"),
            (Code::Unauthenticated, "grpc_unauthenticated"),
            (Code::PermissionDenied, "grpc_permission_denied"),
            (Code::Unimplemented, "grpc_unimplemented"),
            (Code::Unknown, "grpc_unknown"),
        ] {
            match judge(&Status::new(code, "why")) {
                Failure::Drop { reason: r, detail } => {
                    assert_eq!(r.to_string(), reason);
                    assert!(detail.contains("why"), "{detail}");
                }
                other => panic!("{code:?}: {other:?}"),
            }
        }
    }

    /// A library's mapping carries the build id of its code the host
    /// could not name (`module!0xSTART`), so a backend can name it.
    #[test]
    fn mappings_of_unnamed_code_carry_its_build_id() {
        let mut w = window();
        let s = &mut w.services[0];
        s.functions.push(api::WindowFunction {
            name: "liblzma.so.5!0x15ae0".into(),
            module: "liblzma.so.5".into(),
            build_id: "beef".into(),
            address: 0x15ae0,
            ..Default::default()
        });
        let lz = (s.functions.len() - 1) as u32;
        s.stacks[0].function.insert(0, lz);
        s.stacks[0].line.insert(0, 0);
        s.stacks[0].address.insert(0, 0x7f00_0001_5ae4);
        let r = request(&w);
        let d = r.dictionary.as_ref().unwrap();
        let mapping = d
            .mapping_table
            .iter()
            .find(|m| text(d, m.filename_strindex) == "liblzma.so.5")
            .expect("liblzma's mapping");
        let a = &d.attribute_table[mapping.attribute_indices[0] as usize];
        assert_eq!(text(d, a.key_strindex), "process.executable.build_id.gnu");
        assert_eq!(
            a.value.as_ref().and_then(|v| v.value.clone()),
            Some(any_value::Value::StringValue("beef".into()))
        );
    }
}
