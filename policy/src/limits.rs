//! Size limits of a policy: what keeps compiling and evaluating bounded whatever the input.
//!
//! A policy past a limit is refused, never truncated: a rule list of 100,000 entries fails when its
//! 1,025th rule is read (the rest is never held in memory), with the line of the list.

/// Rules in one section (`file_rules`, `network_rules`, `command_rules`, `validation_rules`).
pub const MAX_RULES: usize = 1024;
/// Entries in one list of a rule (`paths`, `commands`, `domains`, `ports`…).
pub const MAX_ENTRIES: usize = 256;
/// Bytes in one pattern (glob, domain, CIDR, rule id).
pub const MAX_PATTERN_BYTES: usize = 1024;
/// Globs one pattern's `{a,b}` groups may expand to.
pub const MAX_ALTERNATIVES: usize = 64;
/// Compiled globs in one policy, after `{a,b}` expansion: bounds memory and the cost of a decision.
pub const MAX_PATTERNS: usize = 16_384;
/// Bytes in a policy or rule name.
pub const MAX_NAME_BYTES: usize = 128;
/// Bytes in a rule's message template.
pub const MAX_MESSAGE_BYTES: usize = 1024;
/// Bytes in a policy's description.
pub const MAX_DESCRIPTION_BYTES: usize = 4096;
