//! Plain data every layer shares: the script and its language, what an execution runs (a script or
//! a job), the verdict and its findings (and those on a run's other content), the execution record
//! with its status and outcome kinds. No I/O and no imports from any other module of the crate
//! (the job protocol's result type comes from `scriptgate_supervisor::job`, plain data too).

pub mod content;
pub mod network;
pub mod record;
pub mod script;
pub mod session;
pub mod verdict;
pub mod work;
