//! The tables of the Firefox Profiler's processed profile as serde writes
//! them (names and columns as its `src/types/profile.ts` has them), and
//! the shared tables (strings, functions, resources, sources, frames,
//! stacks) made from a resolved profile's stacks.
use std::collections::HashMap;

use serde::Serialize;

use super::{category, frame_name};
use crate::model::{ResolvedProfile, Timeline};

#[derive(Serialize)]
pub(super) struct Profile {
    pub meta: Meta,
    pub libs: Vec<Lib>,
    pub shared: SharedTables,
    pub threads: Vec<Thread>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Meta {
    pub interval: f64,
    pub start_time: f64,
    pub process_type: u32,
    pub product: String,
    pub stackwalk: u32,
    pub version: u32,
    pub preprocessed_profile_version: u32,
    pub categories: Vec<Category>,
    pub marker_schema: [MarkerSchema; 1],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sample_units: Option<SampleUnits>,
    pub symbolicated: bool,
    pub uses_only_one_stack_type: bool,
    pub source_code_is_not_on_searchfox: bool,
}

#[derive(Serialize)]
pub(super) struct Category {
    pub name: &'static str,
    pub color: &'static str,
    pub subcategories: &'static [&'static str],
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct SampleUnits {
    pub time: &'static str,
    pub event_delay: &'static str,
    #[serde(rename = "threadCPUDelta")]
    pub thread_cpu_delta: &'static str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct MarkerSchema {
    name: &'static str,
    tooltip_label: &'static str,
    table_label: &'static str,
    chart_label: &'static str,
    display: [&'static str; 3],
    fields: [MarkerField; 1],
    description: &'static str,
}

#[derive(Serialize)]
struct MarkerField {
    key: &'static str,
    label: &'static str,
    format: &'static str,
}

impl MarkerSchema {
    /// The schema of profd's markers: `Text` markers (a payload type the
    /// Firefox Profiler knows), whose `name` field says what the marker
    /// concerns.
    pub fn text() -> MarkerSchema {
        MarkerSchema {
            name: "Text",
            tooltip_label: "{marker.name} {marker.data.name}",
            table_label: "{marker.name} {marker.data.name}",
            chart_label: "{marker.name} {marker.data.name}",
            display: ["marker-chart", "marker-table", "timeline-overview"],
            fields: [MarkerField {
                key: "name",
                label: "Details",
                format: "string",
            }],
            description: "A process's start of profiling, exec or exit",
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Lib {
    pub arch: String,
    pub name: String,
    pub path: String,
    pub debug_name: String,
    pub debug_path: String,
    pub breakpad_id: String,
    pub code_id: Option<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Thread {
    pub process_type: &'static str,
    pub process_startup_time: f64,
    pub process_shutdown_time: Option<f64>,
    pub register_time: f64,
    pub unregister_time: Option<f64>,
    pub paused_ranges: [(); 0],
    pub show_markers_in_timeline: bool,
    pub name: String,
    pub is_main_thread: bool,
    pub process_name: String,
    pub pid: String,
    pub tid: u32,
    pub samples: Samples,
    pub markers: Markers,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Samples {
    pub stack: Vec<Option<u32>>,
    pub time_deltas: Vec<f64>,
    pub weight: Option<Vec<u64>>,
    pub weight_type: &'static str,
    #[serde(rename = "threadCPUDelta", skip_serializing_if = "Option::is_none")]
    pub thread_cpu_delta: Option<Vec<u64>>,
    pub length: usize,
}

/// A thread's markers: instants of the `Other` category.
#[derive(Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub(super) struct Markers {
    data: Vec<TextPayload>,
    name: Vec<u32>,
    start_time: Vec<f64>,
    end_time: Vec<Option<f64>>,
    phase: Vec<u8>,
    category: Vec<u32>,
    length: usize,
}

#[derive(Serialize)]
struct TextPayload {
    #[serde(rename = "type")]
    kind: &'static str,
    name: String,
}

impl Markers {
    /// An instant marker named by string `name` at `time` (ms).
    pub fn push(&mut self, name: u32, time: f64, detail: String) {
        self.data.push(TextPayload {
            kind: "Text",
            name: detail,
        });
        self.name.push(name);
        self.start_time.push(time);
        self.end_time.push(None);
        self.phase.push(0);
        self.category.push(0);
        self.length += 1;
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct SharedTables {
    stack_table: StackTable,
    frame_table: FrameTable,
    func_table: FuncTable,
    resource_table: ResourceTable,
    native_symbols: NativeSymbols,
    string_array: Vec<String>,
    sources: SourceTable,
    source_location_table: SourceLocationTable,
}

#[derive(Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct StackTable {
    frame: Vec<u32>,
    prefix_offset: Vec<u32>,
    length: usize,
}

#[derive(Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct FrameTable {
    address: Vec<i64>,
    lib: Vec<i64>,
    inline_depth: Vec<u32>,
    category: Vec<Option<u32>>,
    subcategory: Vec<Option<u32>>,
    func: Vec<u32>,
    native_symbol: Vec<Option<u32>>,
    #[serde(rename = "innerWindowID")]
    inner_window_id: Vec<Option<u64>>,
    line: Vec<Option<u32>>,
    column: Vec<Option<u32>>,
    original_location: Vec<Option<u32>>,
    length: usize,
}

#[derive(Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct FuncTable {
    name: Vec<u32>,
    #[serde(rename = "isJS")]
    is_js: Vec<bool>,
    #[serde(rename = "relevantForJS")]
    relevant_for_js: Vec<bool>,
    resource: Vec<i64>,
    source: Vec<Option<u32>>,
    line_number: Vec<Option<u32>>,
    column_number: Vec<Option<u32>>,
    original_location: Vec<Option<u32>>,
    length: usize,
}

#[derive(Serialize, Default)]
struct ResourceTable {
    length: usize,
    name: Vec<u32>,
    host: Vec<Option<u32>>,
    #[serde(rename = "type")]
    kind: Vec<u8>,
}

#[derive(Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct NativeSymbols {
    lib_index: Vec<u32>,
    address: Vec<u64>,
    name: Vec<u32>,
    function_size: Vec<Option<u64>>,
    length: usize,
}

#[derive(Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct SourceTable {
    length: usize,
    id: Vec<Option<String>>,
    filename: Vec<u32>,
    start_line: Vec<u32>,
    start_column: Vec<u32>,
    #[serde(rename = "sourceMapURL")]
    source_map_url: Vec<Option<u32>>,
    content: Vec<Option<String>>,
}

#[derive(Serialize, Default)]
struct SourceLocationTable {
    source: Vec<u32>,
    line: Vec<u32>,
    column: Vec<u32>,
    length: usize,
}

/// `ResourceType.Unknown` and `ResourceType.Library`.
const RESOURCE_UNKNOWN: u8 = 0;
const RESOURCE_LIBRARY: u8 = 1;

/// What makes two frames one: function, address and library (-1: none),
/// line, inline depth.
type FrameKey = (u32, i64, i64, u32, u32);

/// The shared tables under construction, each row made once.
#[derive(Default)]
pub(super) struct Shared {
    strings: Vec<String>,
    string_of: HashMap<String, u32>,
    funcs: FuncTable,
    func_of: HashMap<u32, u32>,
    resources: ResourceTable,
    resource_of: HashMap<String, i64>,
    sources: SourceTable,
    source_of: HashMap<String, u32>,
    frames: FrameTable,
    frame_of: HashMap<FrameKey, u32>,
    stacks: StackTable,
    stack_of: HashMap<(u32, u32), u32>,
}

impl Shared {
    /// The index of string `s`, added when new.
    pub fn string(&mut self, s: &str) -> u32 {
        if let Some(&i) = self.string_of.get(s) {
            return i;
        }
        let i = self.strings.len() as u32;
        self.strings.push(s.to_string());
        self.string_of.insert(s.to_string(), i);
        i
    }

    /// The resource of functions of `module`: a library when one of `t`'s
    /// libraries has that name, else of unknown type; -1 for no module.
    fn resource(&mut self, t: &Timeline, module: &str) -> i64 {
        if module.is_empty() {
            return -1;
        }
        if let Some(&i) = self.resource_of.get(module) {
            return i;
        }
        let name = self.string(module);
        let r = &mut self.resources;
        let i = r.length as i64;
        r.name.push(name);
        r.host.push(None);
        let library = t.libs.iter().any(|l| l.name == module);
        r.kind.push(if library {
            RESOURCE_LIBRARY
        } else {
            RESOURCE_UNKNOWN
        });
        r.length += 1;
        self.resource_of.insert(module.to_string(), i);
        i
    }

    /// The source (file) named `file`; None for no file.
    fn source(&mut self, file: &str) -> Option<u32> {
        if file.is_empty() {
            return None;
        }
        if let Some(&i) = self.source_of.get(file) {
            return Some(i);
        }
        let filename = self.string(file);
        let s = &mut self.sources;
        let i = s.length as u32;
        s.id.push(None);
        s.filename.push(filename);
        s.start_line.push(1);
        s.start_column.push(1);
        s.source_map_url.push(None);
        s.content.push(None);
        s.length += 1;
        self.source_of.insert(file.to_string(), i);
        Some(i)
    }

    /// The func of profd function `id`.
    fn func(&mut self, p: &ResolvedProfile, t: &Timeline, id: u32) -> u32 {
        if let Some(&i) = self.func_of.get(&id) {
            return i;
        }
        let unknown = Default::default();
        let info = p.functions.get(id as usize).unwrap_or(&unknown);
        let name = self.string(&frame_name(info));
        let resource = self.resource(t, &info.module);
        let source = self.source(&info.file);
        let f = &mut self.funcs;
        let i = f.length as u32;
        f.name.push(name);
        f.is_js.push(false);
        f.relevant_for_js.push(false);
        f.resource.push(resource);
        f.source.push(source);
        // Where a function starts is not known, only the frames' lines.
        f.line_number.push(None);
        f.column_number.push(None);
        f.original_location.push(None);
        f.length += 1;
        self.func_of.insert(id, i);
        i
    }

    /// The stack of profd stack `index` (of `p`), its frames made; None
    /// for an empty stack.
    pub fn stack(&mut self, p: &ResolvedProfile, t: &Timeline, index: u32) -> Option<u32> {
        let stack = &p.stacks[index as usize];
        let mut prefix: Option<u32> = None;
        let mut depth = 0;
        let mut caller_address = None;
        for f in stack.frames.iter().rev() {
            let unknown = Default::default();
            let info = p.functions.get(f.function as usize).unwrap_or(&unknown);
            // Inlined functions at their caller's address are deeper in
            // one inline stack; the outermost has depth 0.
            depth = match info.inlined && caller_address == Some(f.address) {
                true => depth + 1,
                false => 0,
            };
            caller_address = Some(f.address);
            let (lib, address) = match t.lib_of(index, f.address) {
                Some((lib, relative)) => (i64::from(lib), relative as i64),
                None => (-1, -1),
            };
            let key = (f.function, address, lib, f.line, depth);
            let frame = match self.frame_of.get(&key) {
                Some(&i) => i,
                None => {
                    let func = self.func(p, t, f.function);
                    let (cat, sub) = category(info, f.address);
                    let fr = &mut self.frames;
                    let i = fr.length as u32;
                    fr.address.push(address);
                    fr.lib.push(lib);
                    fr.inline_depth.push(depth);
                    fr.category.push(Some(cat));
                    fr.subcategory.push(Some(sub));
                    fr.func.push(func);
                    fr.native_symbol.push(None);
                    fr.inner_window_id.push(None);
                    fr.line.push((f.line > 0).then_some(f.line));
                    fr.column.push(None);
                    fr.original_location.push(None);
                    fr.length += 1;
                    self.frame_of.insert(key, i);
                    i
                }
            };
            // Prefixes are numbered from 1 in the key; 0 is no prefix.
            let key = (prefix.map_or(0, |p| p + 1), frame);
            let next = self.stacks.length as u32;
            let at = *self.stack_of.entry(key).or_insert(next);
            if at == next {
                let s = &mut self.stacks;
                s.frame.push(frame);
                s.prefix_offset.push(prefix.map_or(0, |p| next - p));
                s.length += 1;
            }
            prefix = Some(at);
        }
        prefix
    }

    /// The shared tables, whole.
    pub fn finish(self) -> SharedTables {
        SharedTables {
            stack_table: self.stacks,
            frame_table: self.frames,
            func_table: self.funcs,
            resource_table: self.resources,
            native_symbols: NativeSymbols::default(),
            string_array: self.strings,
            sources: self.sources,
            source_location_table: SourceLocationTable::default(),
        }
    }
}
