//! Finds an Apache Iggy server for the integration tests.

use agdx::log::SharedLog;

/// A connected Iggy log for one test, with whatever keeps its server alive.
pub struct IggyTestLog {
    pub log: SharedLog,
}

/// Connects to a test Iggy server, or says why none is available.
pub async fn iggy_log() -> Result<IggyTestLog, String> {
    Err("the Iggy binding is not built yet".to_owned())
}
