//! Plain data every layer shares: the script and its language, the verdict and its findings, the
//! execution record with its status and outcome kinds. No I/O and no imports from the layers above.

pub mod record;
pub mod script;
pub mod verdict;
