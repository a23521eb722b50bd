//! Function names for people: finding the function a user named (an id, a
//! name, a part of one or a regular expression), and shortening long C++
//! and Rust names for text (template arguments and parameter lists elided,
//! cut in the middle so that the method's name stays). Exports keep whole
//! names; they do not come here.
use std::borrow::Cow;

use crate::api;
use crate::model::ResolvedProfile;
use crate::views::inclusive_counts;

/// Most functions an ambiguous name lists.
pub const MAX_LISTED: usize = 10;

/// Widest a listed name gets in an error.
const LISTED_WIDTH: usize = 100;

/// Largest compiled regular expression a name may make, in bytes.
const REGEX_SIZE: usize = 1 << 20;

/// Why [`find_function`] selected no function.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FindError {
    /// No function has this id.
    #[error("no function has id {0}: `--ids` tables and the JSON report show the ids")]
    NoId(u64),
    /// No name is, contains or matches the text.
    #[error(
        "no function's name is, contains or matches {}: give an exact name, a part of one, \
         a regular expression or #ID",
        crate::quoted(.0)
    )]
    NoMatch(String),
    /// Several functions match; some of them, most samples first.
    #[error(
        "{} matches {count} functions; give one's #ID or more of its name: {}",
        crate::quoted(.pattern),
        listing(.listed, .count)
    )]
    Ambiguous {
        /// What the caller gave.
        pattern: String,
        /// How many functions match.
        count: usize,
        /// Up to [`MAX_LISTED`] of them: id and name.
        listed: Vec<(u32, String)>,
    },
}

fn listing(listed: &[(u32, String)], count: &usize) -> String {
    let mut s = listed
        .iter()
        .map(|(id, name)| format!("#{id} {name}"))
        .collect::<Vec<_>>()
        .join(", ");
    if *count > listed.len() {
        s.push_str(&format!(" and {} more", count - listed.len()));
    }
    s
}

/// The function `r` selects. By id when `r.name` is empty. Else, in this
/// order: the functions named exactly `r.name`; the sampled functions whose
/// name contains it; the sampled functions whose name matches it as a
/// regular expression. When those are all one name, the one with the most
/// inclusive samples (then the lowest id) is chosen; several names are
/// [`FindError::Ambiguous`].
pub fn find_function(p: &ResolvedProfile, r: &api::FunctionRef) -> Result<u32, FindError> {
    if r.name.is_empty() {
        return if r.id < p.functions.len() as u64 {
            Ok(r.id as u32)
        } else {
            Err(FindError::NoId(r.id))
        };
    }
    let inclusive = inclusive_counts(p);
    let ids = |keep: &dyn Fn(&str) -> bool, sampled: bool| -> Vec<u32> {
        p.functions
            .iter()
            .enumerate()
            .filter(|(id, f)| (!sampled || inclusive[*id] > 0) && keep(&f.name))
            .map(|(id, _)| id as u32)
            .collect()
    };
    let mut found = ids(&|name| name == r.name, false);
    if found.is_empty() {
        found = ids(&|name| name.contains(r.name.as_str()), true);
    }
    if found.is_empty() {
        if let Ok(re) = regex::RegexBuilder::new(&r.name)
            .size_limit(REGEX_SIZE)
            .build()
        {
            found = ids(&|name| re.is_match(name), true);
        }
    }
    // Most samples first, then the lowest id.
    found.sort_by(|a, b| {
        inclusive[*b as usize]
            .cmp(&inclusive[*a as usize])
            .then(a.cmp(b))
    });
    let Some(&first) = found.first() else {
        return Err(FindError::NoMatch(r.name.clone()));
    };
    let name = |id: u32| p.functions[id as usize].name.as_str();
    if found.iter().all(|&id| name(id) == name(first)) {
        return Ok(first);
    }
    let shown: Vec<u32> = found.iter().copied().take(MAX_LISTED).collect();
    // Short names, unless two of them would read the same.
    let short: Vec<String> = shown
        .iter()
        .map(|&id| short_name(name(id)).into_owned())
        .collect();
    let distinct = short.iter().collect::<std::collections::HashSet<_>>().len() == short.len();
    let listed = shown
        .iter()
        .zip(short)
        .map(|(&id, s)| {
            let s = if distinct { s } else { name(id).to_string() };
            (id, cut_middle(&s, LISTED_WIDTH))
        })
        .collect();
    Err(FindError::Ambiguous {
        pattern: r.name.clone(),
        count: found.len(),
        listed,
    })
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '$'
}

/// The index just past the bracket closing the one at `open` (`<` or `(`),
/// or `None` when it is not closed. `->` is not a closing `>`.
fn closing(chars: &[char], open: usize) -> Option<usize> {
    let (o, c) = if chars[open] == '<' {
        ('<', '>')
    } else {
        ('(', ')')
    };
    let mut depth = 0usize;
    for (i, &ch) in chars.iter().enumerate().skip(open) {
        if ch == o {
            depth += 1;
        } else if ch == c && !(c == '>' && i > 0 && chars[i - 1] == '-') {
            depth -= 1;
            if depth == 0 {
                return Some(i + 1);
            }
        }
    }
    None
}

/// The operator symbol after `operator` at `i` (`[]`, `()`, `<<=`, ...;
/// empty for a conversion or `new`/`delete`, whose words are copied as
/// text): its length in chars.
fn operator_len(chars: &[char], i: usize) -> usize {
    let rest = &chars[i..];
    if rest.starts_with(&['(', ')']) || rest.starts_with(&['[', ']']) {
        return 2;
    }
    rest.iter()
        .take_while(|c| "<>=!+-*/%^&|~,".contains(**c))
        .count()
}

/// A C++ or Rust name with its template arguments and parameter lists
/// elided: `std::map<int, long>::operator[](int const&)` becomes
/// `std::map<…>::operator[](…)`. Empty lists stay (`main()`), as do
/// brackets that are not arguments: `(anonymous namespace)`, Rust's
/// `<T as Trait>::f` (whose inner arguments are elided), operator names.
pub fn short_name(name: &str) -> Cow<'_, str> {
    if !name.contains(['<', '(']) {
        return Cow::Borrowed(name);
    }
    let chars: Vec<char> = name.chars().collect();
    let mut out = String::with_capacity(name.len());
    let mut i = 0;
    // Just after an operator's name: a `(` opens its parameters.
    let mut params_next = false;
    while i < chars.len() {
        let ch = chars[i];
        let prev = i.checked_sub(1).map(|p| chars[p]);
        if ch == 'o'
            && chars[i..].starts_with(&['o', 'p', 'e', 'r', 'a', 't', 'o', 'r'])
            && !prev.is_some_and(is_ident)
        {
            let n = 8 + operator_len(&chars, i + 8);
            out.extend(&chars[i..i + n]);
            i += n;
            params_next = n > 8;
            continue;
        }
        let elide = match ch {
            '<' => prev.is_some_and(is_ident),
            '(' => params_next || prev.is_some_and(|p| is_ident(p) || matches!(p, '>' | ']' | ')')),
            _ => false,
        };
        params_next = false;
        match elide.then(|| closing(&chars, i)).flatten() {
            Some(end) => {
                let close = chars[end - 1];
                if end == i + 2 {
                    out.push(ch);
                } else {
                    out.push(ch);
                    out.push('…');
                }
                out.push(close);
                i = end;
            }
            None => {
                out.push(ch);
                i += 1;
            }
        }
    }
    Cow::Owned(out)
}

/// Where the last part of a name starts (after its last `::` or `.`
/// outside brackets), in chars.
fn last_part(chars: &[char]) -> usize {
    let mut depth = 0i32;
    let mut start = 0;
    for (i, &ch) in chars.iter().enumerate() {
        match ch {
            '<' | '(' | '[' => depth += 1,
            '>' if i > 0 && chars[i - 1] == '-' => {}
            '>' | ')' | ']' => depth = (depth - 1).max(0),
            ':' if depth == 0 && i > 0 && chars[i - 1] == ':' => start = i + 1,
            _ => {}
        }
    }
    start
}

/// `s` in at most `max` characters: when longer, cut in the middle with
/// `…`, keeping its last part (the method or function's own name) whole
/// when it fits, else the end of it.
pub fn cut_middle(s: &str, max: usize) -> String {
    let max = max.max(2);
    let chars: Vec<char> = s.chars().collect();
    if chars.len() <= max {
        return s.to_string();
    }
    let tail = chars.len() - last_part(&chars);
    let keep_tail = if tail < max - 1 { tail } else { max - 1 };
    let head = max - 1 - keep_tail;
    let mut out: String = chars[..head].iter().collect();
    out.push('…');
    out.extend(&chars[chars.len() - keep_tail..]);
    out
}

/// A function's name for text output, at most `width` characters: shortened
/// ([`short_name`]) and cut in the middle ([`cut_middle`]), or whole when
/// `full`.
pub fn display_name(name: &str, width: usize, full: bool) -> Cow<'_, str> {
    if full {
        return Cow::Borrowed(name);
    }
    let short = short_name(name);
    if short.chars().count() <= width {
        short
    } else {
        Cow::Owned(cut_middle(&short, width))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::known;

    #[test]
    fn templates_and_parameters_are_elided() {
        let cases = [
            ("main", "main"),
            ("main()", "main()"),
            (
                "std::map<int, std::string, std::less<int> >::operator[](int const&)",
                "std::map<…>::operator[](…)",
            ),
            (
                "std::map<int, long>::lower_bound(int const&) const",
                "std::map<…>::lower_bound(…) const",
            ),
            ("operator<<(std::ostream&, Foo const&)", "operator<<(…)"),
            ("Foo::operator()(int)", "Foo::operator()(…)"),
            (
                "Foo::operator<(Foo const&) const",
                "Foo::operator<(…) const",
            ),
            (
                "(anonymous namespace)::work(int)",
                "(anonymous namespace)::work(…)",
            ),
            (
                "<alloc::vec::Vec<u8> as core::ops::drop::Drop>::drop",
                "<alloc::vec::Vec<…> as core::ops::drop::Drop>::drop",
            ),
            (
                "core::ptr::drop_in_place<std::fs::File>",
                "core::ptr::drop_in_place<…>",
            ),
            ("f(void (*)(int), std::function<int ()>)", "f(…)"),
            (
                "g<int>(std::pair<int,int>)::{lambda(int)#1}::operator()(int) const",
                "g<…>(…)::{lambda(…)#1}::operator()(…) const",
            ),
            ("main.(*T).Method", "main.(*T).Method"),
            ("broken<int(", "broken<int("),
            ("[kernel] 0xffffffff81000000", "[kernel] 0xffffffff81000000"),
        ];
        for (name, short) in cases {
            assert_eq!(short_name(name), short, "{name}");
        }
    }

    #[test]
    fn long_names_keep_their_method() {
        let a = "std::map<…>::operator[](…)";
        let b = "std::map<…>::lower_bound(…)";
        assert_eq!(cut_middle(a, 20), "std::m…operator[](…)");
        assert_eq!(cut_middle(b, 20), "std::…lower_bound(…)");
        assert_eq!(cut_middle(a, 40), a);
        // A last part longer than the width keeps its end.
        assert_eq!(
            cut_middle("ns::a_very_long_function_name", 10),
            "…tion_name"
        );
        assert_eq!(cut_middle("héllo_wörld_long", 8), "…ld_long");
        let full = "std::_Rb_tree<int, std::pair<int const, long>, std::_Select1st<std::pair<int const, long> >, std::less<int>, std::allocator<std::pair<int const, long> > >::_M_lower_bound(std::_Rb_tree_node<std::pair<int const, long> >*, std::_Rb_tree_node_base*, int const&)";
        assert_eq!(
            display_name(full, 40, false),
            "std::_Rb_tree<…>::_M_lower_bound(…)"
        );
        assert_eq!(display_name(full, 20, false), "st…_M_lower_bound(…)");
        assert_eq!(display_name(full, 20, true), full);
    }

    fn by(p: &ResolvedProfile, id: u64, name: &str) -> Result<u32, FindError> {
        find_function(
            p,
            &api::FunctionRef {
                id,
                name: name.into(),
            },
        )
    }

    #[test]
    fn exact_names_win_then_parts_then_regexes() {
        use crate::testdata::{A, B, C, MAIN, R, UNUSED};
        let mut p = known();
        assert_eq!(by(&p, 0, "c"), Ok(C));
        assert_eq!(by(&p, 3, ""), Ok(C));
        assert_eq!(by(&p, UNUSED as u64, ""), Ok(UNUSED));
        assert_eq!(by(&p, 99, ""), Err(FindError::NoId(99)));
        assert_eq!(by(&p, 0, "nope"), Err(FindError::NoMatch("nope".into())));
        // Two functions named "r": the one with more inclusive samples wins.
        p.functions[UNUSED as usize].name = "r".into();
        assert_eq!(by(&p, 0, "r"), Ok(R));
        let mut p = known();
        p.functions[A as usize].name = "map_work<int>(int)".into();
        p.functions[B as usize].name = "map_work<long>(long)".into();
        // A part of one name; a part of two is ambiguous, most samples first.
        assert_eq!(by(&p, 0, "ai"), Ok(MAIN));
        assert_eq!(by(&p, 0, "<long>"), Ok(B));
        let err = by(&p, 0, "map_work").unwrap_err();
        assert_eq!(
            err,
            FindError::Ambiguous {
                pattern: "map_work".into(),
                count: 2,
                listed: vec![
                    (A, "map_work<int>(int)".into()),
                    (B, "map_work<long>(long)".into())
                ],
            }
        );
        assert!(
            err.to_string()
                .contains("#1 map_work<int>(int), #2 map_work<long>(long)"),
            "{err}"
        );
        // A regular expression, when no name contains the text.
        assert_eq!(by(&p, 0, "^map_w.*int"), Ok(A));
        assert_eq!(by(&p, 0, "^ma(in|p)$"), Ok(MAIN));
        // The unsampled function is found by its exact name only.
        assert_eq!(by(&p, 0, "unused"), Ok(UNUSED));
        assert_eq!(by(&p, 0, "unuse"), Err(FindError::NoMatch("unuse".into())));
        // An exact name wins over the names that contain it.
        p.functions[C as usize].name = "map_work".into();
        assert_eq!(by(&p, 0, "map_work"), Ok(C));
    }
}
