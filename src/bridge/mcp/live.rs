//! Following the registry: the tool set as the live agents change.

use std::sync::Arc;
use std::time::Duration;

use agdx_wire::AgentId;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::tools::ToolSet;
use crate::cards::LiveAgents;
use crate::clock::SharedClock;
use crate::log::{LogError, SharedLog};
use crate::topology::Topology;

/// The live agents folded so far, and the tools they give.
pub(super) struct Follower {
    log: SharedLog,
    topology: Topology,
    agents: LiveAgents,
    bridge: AgentId,
    clock: SharedClock,
}

impl Follower {
    /// From the cards view's snapshot, read up to the registry's end.
    pub(super) async fn start(
        log: SharedLog,
        topology: Topology,
        bridge: AgentId,
        clock: SharedClock,
    ) -> Result<Self, LogError> {
        let agents = LiveAgents::resume(&log, &topology).await;
        let mut follower = Self {
            log,
            topology,
            agents,
            bridge,
            clock,
        };
        follower.catch_up().await?;
        Ok(follower)
    }

    async fn catch_up(&mut self) -> Result<(), LogError> {
        self.agents
            .catch_up(&self.log, &self.topology.registry)
            .await
    }

    /// The tools of the agents live now.
    pub(super) fn tools(&self) -> ToolSet {
        ToolSet::from_live(&self.agents.live(self.clock.now_micros()), &self.bridge)
    }

    /// Reads the registry every `every` until `closing`, publishing the tool
    /// set on `tools` whenever it changes (an agent came, left, or its card
    /// expired). A failed read is logged and tried again at the next turn:
    /// the last tool set stays meanwhile.
    pub(super) async fn run(
        mut self,
        tools: watch::Sender<Arc<ToolSet>>,
        every: Duration,
        closing: CancellationToken,
    ) {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = closing.cancelled() => return,
                _ = tick.tick() => {}
            }
            if let Err(error) = self.catch_up().await {
                tracing::warn!(%error, "reading the agent registry failed; the tool list stays as it was until the next turn");
                continue;
            }
            let now = self.tools();
            tools.send_if_modified(|current| {
                if **current == now {
                    return false;
                }
                tracing::info!(
                    tools = now.len(),
                    "the live agents changed: tool list updated"
                );
                *current = Arc::new(now);
                true
            });
        }
    }
}
