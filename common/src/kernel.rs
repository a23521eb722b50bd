//! What a caller is shown of the kernel's frames: everything, their names
//! without their addresses, or one `[kernel]` frame in their place. Applied
//! to a whole resolved profile (views and exports are computed from it) or
//! to a session's function table (what Watch sends), before either leaves
//! the daemon. Which caller gets which is the daemon's policy, not decided
//! here.
use std::collections::HashMap;

use crate::api;
use crate::model::{is_kernel, percent, FrameRef, FunctionInfo, ResolvedProfile, ResolvedStack};

/// The name and module of the one frame that stands for kernel code when
/// kernel frames are folded.
pub const KERNEL: &str = "[kernel]";

/// The module of a function of a loadable kernel module: `[kernel.NAME]`
/// (`[kernel.xfs]`), as the kernel image's is [`KERNEL`].
pub fn module_of(name: &str) -> String {
    format!("[kernel.{name}]")
}

/// Whether `module` is the kernel's: its image ([`KERNEL`]) or a loadable
/// module (see [`module_of`]).
pub fn is_kernel_module(module: &str) -> bool {
    module == KERNEL || (module.starts_with("[kernel.") && module.ends_with(']'))
}

/// How kernel frames are shown to one caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KernelFrames {
    /// Names and addresses, as sampled.
    #[default]
    Full,
    /// Names only: kernel addresses are 0, and a name that holds a kernel
    /// address (`[kernel] 0xffffffff81000000`, for code no symbol covers)
    /// loses it.
    Names,
    /// Each run of kernel frames becomes one frame [`KERNEL`], without an
    /// address; no kernel function is named.
    Folded,
}

/// The function kernel frames become when folded.
pub fn folded_function() -> FunctionInfo {
    FunctionInfo {
        name: KERNEL.into(),
        module: KERNEL.into(),
        file: String::new(),
        inlined: false,
        origin: None,
    }
}

/// A word of a name that is a kernel address (`0xffff...`).
fn is_kernel_address(word: &str) -> bool {
    word.strip_prefix("0x")
        .and_then(|hex| u64::from_str_radix(hex, 16).ok())
        .is_some_and(is_kernel)
}

/// `name` without the kernel addresses it shows, or None when it shows
/// none. A name that was only an address becomes [`KERNEL`].
pub fn without_addresses(name: &str) -> Option<String> {
    if !name.split_whitespace().any(is_kernel_address) {
        return None;
    }
    let rest: Vec<&str> = name
        .split_whitespace()
        .filter(|w| !is_kernel_address(w))
        .collect();
    Some(if rest.is_empty() {
        KERNEL.to_string()
    } else {
        rest.join(" ")
    })
}

impl KernelFrames {
    /// The profile as a caller shown kernel frames this way sees it.
    /// Folded, stacks that become the same are merged, and the folded
    /// function is the profile's own `[kernel]` function if it has one
    /// (else it is added).
    pub fn apply(self, p: &mut ResolvedProfile) {
        self.apply_mapped(p);
    }

    /// [`Self::apply`], returning where each stack went when stacks were
    /// merged (`map[old index] = new index`).
    pub fn apply_mapped(self, p: &mut ResolvedProfile) -> Option<Vec<u32>> {
        if self == KernelFrames::Full {
            return None;
        }
        // Looked for before names change: a placeholder may become `[kernel]`.
        let folded_info = folded_function();
        let folded = p.functions.iter().position(|f| *f == folded_info);
        for f in &mut p.functions {
            if let Some(name) = without_addresses(&f.name) {
                f.name = name;
            }
        }
        if self == KernelFrames::Names {
            for frame in p.stacks.iter_mut().flat_map(|s| s.frames.iter_mut()) {
                if is_kernel(frame.address) {
                    frame.address = 0;
                }
            }
            return None;
        }
        let folded = match folded {
            Some(id) => id as u32,
            None => {
                p.functions.push(folded_info.clone());
                p.functions.len() as u32 - 1
            }
        };
        let folded_frame = FrameRef {
            function: folded,
            line: 0,
            address: 0,
        };
        let mut kernel_functions = vec![false; p.functions.len()];
        let mut index: HashMap<(u32, Vec<FrameRef>), usize> = HashMap::new();
        let mut stacks: Vec<ResolvedStack> = Vec::with_capacity(p.stacks.len());
        let mut map = Vec::with_capacity(p.stacks.len());
        for stack in std::mem::take(&mut p.stacks) {
            let mut frames = Vec::with_capacity(stack.frames.len());
            let mut in_kernel = false;
            for frame in stack.frames {
                if !is_kernel(frame.address) {
                    in_kernel = false;
                    frames.push(frame);
                    continue;
                }
                if let Some(k) = kernel_functions.get_mut(frame.function as usize) {
                    *k = true;
                }
                if !in_kernel {
                    frames.push(folded_frame);
                    in_kernel = true;
                }
            }
            let key = (stack.tid, frames);
            match index.get(&key) {
                Some(&i) => {
                    stacks[i].count += stack.count;
                    map.push(i as u32);
                }
                None => {
                    map.push(stacks.len() as u32);
                    index.insert(key.clone(), stacks.len());
                    stacks.push(ResolvedStack {
                        tid: stack.tid,
                        frames: key.1,
                        count: stack.count,
                    });
                }
            }
        }
        p.stacks = stacks;
        // No kernel function is on a stack any more: none keeps its name.
        for (f, kernel) in p.functions.iter_mut().zip(kernel_functions) {
            if kernel {
                *f = folded_info.clone();
            }
        }
        Some(map)
    }

    /// A session's function table (the rows of [`crate::views::functions`]
    /// or of a Watch update, window counts included) as a caller shown
    /// kernel frames this way sees it. `kernel(id)` tells the functions
    /// named from kernel addresses. Folded, their rows become one row of
    /// function `folded`, whose inclusive and exclusive counts are their
    /// exclusive counts summed: kernel frames are the innermost of a stack,
    /// so a sample has one exactly when its innermost frame is one.
    /// Percentages are of `attributed`; rows are sorted as
    /// [`crate::views::functions`] sorts them.
    pub fn rows(
        self,
        rows: &mut Vec<api::Function>,
        kernel: impl Fn(u64) -> bool,
        folded: u64,
        attributed: u64,
    ) {
        if self == KernelFrames::Full {
            return;
        }
        for r in rows.iter_mut() {
            if let Some(name) = without_addresses(&r.name) {
                r.name = name;
            }
        }
        if self == KernelFrames::Names {
            return;
        }
        let mut sum = api::Function {
            id: folded,
            name: KERNEL.into(),
            module: KERNEL.into(),
            ..Default::default()
        };
        rows.retain(|r| {
            if kernel(r.id) {
                sum.exclusive += r.exclusive;
                sum.window_exclusive += r.window_exclusive;
                return false;
            }
            true
        });
        if sum.exclusive > 0 {
            sum.inclusive = sum.exclusive;
            sum.window_inclusive = sum.window_exclusive;
            sum.inclusive_pct = percent(sum.inclusive, attributed);
            sum.exclusive_pct = percent(sum.exclusive, attributed);
            rows.push(sum);
        }
        crate::views::sort_rows(rows);
    }
}

#[cfg(test)]
#[path = "kernel_tests.rs"]
mod tests;
