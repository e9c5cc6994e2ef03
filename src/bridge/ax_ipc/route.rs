//! Which agent on the log answers which action: `ACTION=AGENT`, where
//! ACTION may be a glob (`memory_*=memory`). An exact name beats a glob;
//! among globs the longest pattern (the most specific) wins, then the one
//! given first.

use std::fmt;
use std::str::FromStr;

use agdx_wire::AgentId;

/// One `ACTION=AGENT` route.
#[derive(Debug, Clone)]
pub struct Route {
    pattern: glob::Pattern,
    agent: AgentId,
}

impl Route {
    /// The agent this route sends to.
    pub fn agent(&self) -> &AgentId {
        &self.agent
    }

    fn is_exact(&self) -> bool {
        glob::Pattern::escape(self.pattern.as_str()) == self.pattern.as_str()
    }
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.pattern.as_str(), self.agent)
    }
}

/// A route that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("route {text:?}: {why}; write ACTION=AGENT, e.g. memory_write=memory or 'memory_*=memory'")]
pub struct RouteError {
    /// What was given.
    pub text: String,
    /// What is wrong with it.
    pub why: String,
}

impl FromStr for Route {
    type Err = RouteError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let error = |why: String| RouteError {
            text: text.to_owned(),
            why,
        };
        let (action, agent) = text
            .split_once('=')
            .ok_or_else(|| error("there is no '='".into()))?;
        if action.is_empty() {
            return Err(error("the action is empty".into()));
        }
        let pattern =
            glob::Pattern::new(action).map_err(|e| error(format!("bad action pattern: {e}")))?;
        let agent = AgentId::new(agent).map_err(|e| error(e.to_string()))?;
        Ok(Route { pattern, agent })
    }
}

/// The routes of a bridge.
#[derive(Debug, Clone, Default)]
pub struct Routes(Vec<Route>);

impl Routes {
    /// The routes, in the order given.
    pub fn new(routes: Vec<Route>) -> Self {
        Self(routes)
    }

    /// The agent for `action`, when a route matches it.
    pub fn agent_for(&self, action: &str) -> Option<&AgentId> {
        let matching = self.0.iter().filter(|r| r.pattern.matches(action));
        // Exact first, then the longest pattern; `max_by_key` keeps the last
        // of equals, so compare in reverse to keep the first given.
        matching
            .rev()
            .max_by_key(|r| (r.is_exact(), r.pattern.as_str().len()))
            .map(Route::agent)
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for Routes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown: Vec<String> = self.0.iter().map(Route::to_string).collect();
        f.write_str(&shown.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn routes(list: &[&str]) -> Routes {
        Routes::new(list.iter().map(|r| r.parse().unwrap()).collect())
    }

    #[test]
    fn exact_beats_glob_and_longer_globs_beat_shorter() {
        let r = routes(&["*=general", "memory_*=memory", "memory_write=writer"]);
        assert_eq!(r.agent_for("memory_write").unwrap().as_str(), "writer");
        assert_eq!(r.agent_for("memory_read").unwrap().as_str(), "memory");
        assert_eq!(r.agent_for("llm_call").unwrap().as_str(), "general");
        let first = routes(&["memory_*=a", "memory_?ead=b", "memory_*=c"]);
        assert_eq!(first.agent_for("memory_list").unwrap().as_str(), "a");
        assert!(
            routes(&["memory_*=memory"])
                .agent_for("web_fetch")
                .is_none()
        );
    }

    #[test]
    fn bad_routes_say_how_to_write_one() {
        let error = "memory".parse::<Route>().unwrap_err();
        assert!(error.to_string().contains("ACTION=AGENT"));
        assert!("=memory".parse::<Route>().is_err());
        assert!("memory_[=memory".parse::<Route>().is_err());
    }
}
