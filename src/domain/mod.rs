//! Plain data every layer shares: the script and its language, what an execution runs, the verdict
//! and its findings, the execution record with its status and outcome kinds. No I/O and no imports
//! from any other module of the crate.

pub mod record;
pub mod script;
pub mod session;
pub mod verdict;
pub mod work;
