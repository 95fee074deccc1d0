//! What tests reach beside the crate's API (the `testing` feature): every
//! Redis script the crate runs, by name, so a test can call one directly
//! against a real Redis and see what it answers and leaves.

use redis::Script;

/// Every script the crate runs, by a name of `<module>/<script>`, as it is
/// sent to Redis (its files joined, its constants written in).
pub fn scripts() -> Vec<(&'static str, &'static Script)> {
    let mut all = crate::queue::lua_scripts();
    all.extend(crate::quota::lua_scripts());
    all.extend(crate::schedule::lua_scripts());
    all.extend(crate::webhooks::lua_scripts());
    all
}

/// The script named `name` (see [`scripts`]).
///
/// # Panics
/// When there is none of that name: a test names it.
pub fn script(name: &str) -> &'static Script {
    match scripts().into_iter().find(|(n, _)| *n == name) {
        Some((_, script)) => script,
        None => panic!("no script is named {name}"),
    }
}
