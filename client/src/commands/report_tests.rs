//! Unit tests of `report.rs`: a query's groups read from its call tree.
use super::*;
use profd_common::api::TreeNode;

fn node(parent: i32, depth: u32, function_id: u64, inclusive: u64, exclusive: u64) -> TreeNode {
    TreeNode {
        parent,
        depth,
        function_id,
        inclusive,
        exclusive,
    }
}

/// Two groups, most samples first; within each, a function's exclusive
/// count is its nodes' and its inclusive count its outermost nodes' on
/// each path: `rec` calling itself counts each stack once.
#[test]
fn groups_count_their_own_functions_once_a_stack() {
    let names = ["[service a]", "[service b]", "main", "rec", "leaf"];
    let tree = GetViewResponse {
        functions: names
            .iter()
            .enumerate()
            .map(|(i, name)| Function {
                id: i as u64,
                name: name.to_string(),
                ..Default::default()
            })
            .collect(),
        nodes: vec![
            node(-1, 0, 0, 10, 0),
            node(0, 1, 2, 10, 1),
            node(1, 2, 4, 3, 3),
            node(1, 2, 3, 6, 1),
            node(3, 3, 3, 5, 2),
            node(4, 4, 4, 3, 3),
            node(-1, 0, 1, 30, 0),
            node(6, 1, 2, 30, 30),
        ],
        ..Default::default()
    };
    let groups = groups(&tree);
    let named = |fs: &[Function]| {
        let mut v: Vec<(String, u64, u64)> = fs
            .iter()
            .map(|f| (f.name.clone(), f.inclusive, f.exclusive))
            .collect();
        v.sort();
        v
    };
    assert_eq!(groups.len(), 2);
    assert_eq!(
        (groups[0].0.name.as_str(), groups[0].0.inclusive),
        ("[service b]", 30)
    );
    assert_eq!(named(&groups[0].1), [("main".to_string(), 30, 30)]);
    assert_eq!(
        (groups[1].0.name.as_str(), groups[1].0.inclusive),
        ("[service a]", 10)
    );
    assert_eq!(
        named(&groups[1].1),
        [
            ("leaf".to_string(), 6, 6),
            ("main".to_string(), 10, 1),
            ("rec".to_string(), 6, 3),
        ]
    );
}
