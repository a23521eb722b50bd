//! What an address is named as: a chain of frames, each a function (name,
//! module, inlined or not) with its source file and line when known, or a
//! placeholder for code that could not be named.
pub use profd_common::model::Origin;
use std::sync::Arc;

/// A function as the function table keys it: name, module, whether it was
/// inlined at this point (the same function called normally is another
/// entry), and for code the host could not name, where it is in its
/// binary (two builds of a module are two functions).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FrameName {
    pub name: String,
    pub module: String,
    pub inlined: bool,
    pub origin: Option<Origin>,
}

/// One frame an address resolved to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub func: FrameName,
    /// Source file of the code at the address, when debug info names it.
    pub file: Option<Arc<str>>,
    /// Source line, 0 when unknown.
    pub line: u32,
    /// False for placeholders (`module+0x..`, `[unknown] 0x..`).
    pub named: bool,
}

impl Frame {
    /// A placeholder frame for code that could not be named.
    pub fn unnamed(name: String, module: impl Into<String>) -> Frame {
        Frame {
            func: FrameName {
                name,
                module: module.into(),
                inlined: false,
                origin: None,
            },
            file: None,
            line: 0,
            named: false,
        }
    }

    /// A named function without source information.
    pub fn named(name: impl Into<String>, module: impl Into<String>) -> Frame {
        Frame {
            func: FrameName {
                name: name.into(),
                module: module.into(),
                inlined: false,
                origin: None,
            },
            file: None,
            line: 0,
            named: true,
        }
    }

    /// A placeholder frame for code of a binary that its host could not
    /// name, with where it is in the binary.
    pub fn unnamed_in(name: String, module: &str, origin: Origin) -> Frame {
        let mut frame = Frame::unnamed(name, module);
        frame.func.origin = Some(origin);
        frame
    }

    /// The frame for an address nothing knows about.
    pub fn unknown(addr: u64) -> Frame {
        Frame::unnamed(format!("[unknown] {addr:#x}"), "[unknown]")
    }
}
