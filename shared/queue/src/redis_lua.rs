//! Every Lua script the project runs in Redis is made here from the `.lua`
//! files beside the module that calls it (`lua/` in its folder), read in at
//! build time with `include_str!`, so a Lua linter and formatter see them
//! (`scripts/test.sh` runs `luacheck` and `stylua --check`).
//!
//! A script is one or more files joined by newlines: shared helpers (a
//! file a script's first line names after `-- after:`) before the file
//! that ends in the script's `return`. Where a script reads arguments in
//! groups of a fixed width, or uses a tuning number the Rust side also
//! reads, the Lua names the Rust constant (`ENQUEUE_GROUP`) and [`script`]
//! writes the constant's value in its place once, when the script is
//! first used: the width is stated once, in Rust, beside the code that
//! builds the group. Such a name is never a Lua variable (`.luacheckrc`
//! lists them as read-only globals, which Redis would refuse at run time
//! had one been left unreplaced).

use std::fmt::Display;

use redis::Script;

/// The script made of `parts` in order, with each constant's name replaced
/// by its value (see [`source`]).
pub(crate) fn script(parts: &[&str], constants: &[(&str, &dyn Display)]) -> Script {
    Script::new(&source(parts, constants))
}

/// The text of `parts` joined by newlines, with every whole-word occurrence
/// of each constant's name (not part of a longer name) replaced by its value.
pub(crate) fn source(parts: &[&str], constants: &[(&str, &dyn Display)]) -> String {
    let mut text = parts.join("\n");
    for (name, value) in constants {
        text = replace_word(&text, name, &value.to_string());
    }
    text
}

fn replace_word(text: &str, word: &str, with: &str) -> String {
    let is_name = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(word) {
        let (before, after) = (&rest[..at], &rest[at + word.len()..]);
        let alone = !before.ends_with(is_name) && !after.starts_with(is_name);
        out.push_str(before);
        out.push_str(if alone { with } else { word });
        rest = after;
    }
    out.push_str(rest);
    out
}

/// A struct whose fields, in order, are one group of a script's arguments
/// (one task's, one entry's), each field one argument: `WIDTH` is their
/// number, the width the script's Lua names, so the Lua and the code that
/// builds a group cannot disagree on it. Passed whole to
/// `ScriptInvocation::arg`, it writes its fields as consecutive arguments,
/// each as the field alone would (the bytes sent do not change).
macro_rules! arg_group {
    ($(#[$meta:meta])* $vis:vis struct $name:ident<$lt:lifetime> { $($(#[$fmeta:meta])* $field:ident: $ty:ty,)+ }) => {
        $(#[$meta])*
        $vis struct $name<$lt> {
            $($(#[$fmeta])* pub(crate) $field: $ty,)+
        }

        impl $name<'_> {
            /// How many arguments the group is.
            pub const WIDTH: usize = [$(stringify!($field)),+].len();
        }

        impl redis::ToRedisArgs for $name<'_> {
            fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
                $(self.$field.write_redis_args(out);)+
            }
        }
    };
}
pub(crate) use arg_group;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_whole_names_are_replaced() {
        let text = source(&["for a = 1, #ARGV, GROUP do", "local GROUPS, MY_GROUP = GROUP_X, GROUP"], &[("GROUP", &7)]);
        assert_eq!(text, "for a = 1, #ARGV, 7 do\nlocal GROUPS, MY_GROUP = GROUP_X, 7");
    }

    arg_group! {
        struct Pair<'a> {
            name: &'a str,
            count: u32,
        }
    }

    #[test]
    fn a_group_writes_its_fields_as_arguments_in_order() {
        use redis::ToRedisArgs;
        let args = Pair { name: "acme", count: 7 }.to_redis_args();
        assert_eq!(args, [b"acme".to_vec(), b"7".to_vec()]);
        assert_eq!(Pair::WIDTH, 2);
    }

    #[test]
    fn text_without_the_name_stays_as_it_is() {
        assert_eq!(source(&["return 1"], &[("GROUP", &7)]), "return 1");
    }
}
