//! Which agent on the log answers an AXON request: routing on the
//! conventional `payload.domain` (dot-separated, e.g. `family.calendar`).
//!
//! A route `PREFIX=AGENT` matches a domain equal to `PREFIX` or below it
//! (`family` matches `family` and `family.calendar`, not `familyfoo`; a
//! trailing `.` or `.*` on the prefix means the same). The longest
//! matching prefix wins; a request without a matching route (or without a
//! string `domain`) goes to the default agent, and without one it is
//! answered `unhandled`.

use std::fmt;
use std::str::FromStr;

use agdx_wire::AgentId;

/// One `--route DOMAIN_PREFIX=AGENT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    prefix: String,
    agent: AgentId,
}

impl Route {
    /// Requests whose domain is `prefix` or below it go to `agent`.
    pub fn new(prefix: &str, agent: AgentId) -> Result<Self, RouteError> {
        let prefix = prefix.trim_end_matches('*').trim_end_matches('.');
        if prefix.is_empty() {
            return Err(RouteError::EmptyPrefix);
        }
        Ok(Self {
            prefix: prefix.to_owned(),
            agent,
        })
    }

    /// The domain prefix (without a trailing `.` or `.*`).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The agent it routes to.
    pub fn agent(&self) -> &AgentId {
        &self.agent
    }

    fn matches(&self, domain: &str) -> bool {
        domain
            .strip_prefix(self.prefix.as_str())
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
    }
}

/// Why a route does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    /// No `=`.
    #[error("a route is DOMAIN_PREFIX=AGENT, e.g. family.calendar=calendar")]
    Shape,
    /// The prefix is empty.
    #[error(
        "a route needs a domain prefix; to send every request to one agent, make it the default agent"
    )]
    EmptyPrefix,
    /// The agent name is not an agent id.
    #[error("the agent of a route: {0}")]
    Agent(String),
}

impl RouteError {
    /// Whether trying again may succeed (never: the text is wrong).
    pub fn is_retryable(&self) -> bool {
        match self {
            RouteError::Shape => false,
            RouteError::EmptyPrefix => false,
            RouteError::Agent(_) => false,
        }
    }
}

impl FromStr for Route {
    type Err = RouteError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (prefix, agent) = text.split_once('=').ok_or(RouteError::Shape)?;
        let agent = AgentId::new(agent.trim()).map_err(|e| RouteError::Agent(e.to_string()))?;
        Route::new(prefix.trim(), agent)
    }
}

/// The routes and the default agent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Routes {
    routes: Vec<Route>,
    default_agent: Option<AgentId>,
}

impl Routes {
    /// `routes`, then `default_agent` for everything else.
    pub fn new(routes: Vec<Route>, default_agent: Option<AgentId>) -> Self {
        Self {
            routes,
            default_agent,
        }
    }

    /// The agent for a request with `domain` (none when it has no string domain).
    pub fn agent_for(&self, domain: Option<&str>) -> Option<&AgentId> {
        domain
            .and_then(|domain| {
                self.routes
                    .iter()
                    .filter(|r| r.matches(domain))
                    .max_by_key(|r| r.prefix.len())
            })
            .map(Route::agent)
            .or(self.default_agent.as_ref())
    }
}

impl fmt::Display for Routes {
    /// `family → home, work.calendar → calendar; otherwise → echo`, for
    /// messages that must say what exists.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.routes.is_empty() {
            f.write_str("no routes")?;
        }
        for (i, route) in self.routes.iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            write!(f, "{sep}{}.* → {}", route.prefix, route.agent)?;
        }
        match &self.default_agent {
            Some(agent) => write!(f, "; any other domain → {agent}"),
            None => f.write_str("; no default agent"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn routes(pairs: &[&str], default: Option<&str>) -> Routes {
        Routes::new(
            pairs.iter().map(|p| p.parse().unwrap()).collect(),
            default.map(|d| AgentId::new(d).unwrap()),
        )
    }

    fn to(routes: &Routes, domain: Option<&str>) -> Option<String> {
        routes.agent_for(domain).map(|a| a.as_str().to_owned())
    }

    #[test]
    fn the_longest_matching_prefix_wins_on_segment_boundaries() {
        let r = routes(
            &["family=home", "family.calendar=cal", "work.*=office"],
            None,
        );
        assert_eq!(to(&r, Some("family")).as_deref(), Some("home"));
        assert_eq!(to(&r, Some("family.school")).as_deref(), Some("home"));
        assert_eq!(to(&r, Some("family.calendar")).as_deref(), Some("cal"));
        assert_eq!(to(&r, Some("family.calendar.x")).as_deref(), Some("cal"));
        assert_eq!(to(&r, Some("work.projects")).as_deref(), Some("office"));
        assert_eq!(to(&r, Some("familyfoo")), None);
        assert_eq!(to(&r, None), None);
    }

    #[test]
    fn the_default_agent_takes_the_rest() {
        let r = routes(&["family=home"], Some("echo"));
        assert_eq!(to(&r, Some("meta.status")).as_deref(), Some("echo"));
        assert_eq!(to(&r, None).as_deref(), Some("echo"));
        assert_eq!(r.to_string(), "family.* → home; any other domain → echo");
        assert_eq!(Routes::default().to_string(), "no routes; no default agent");
    }

    #[test]
    fn malformed_routes_say_how_to_write_one() {
        assert_eq!("family".parse::<Route>(), Err(RouteError::Shape));
        assert_eq!("=home".parse::<Route>(), Err(RouteError::EmptyPrefix));
        assert_eq!(".*=home".parse::<Route>(), Err(RouteError::EmptyPrefix));
        assert!(matches!(
            "family=".parse::<Route>(),
            Err(RouteError::Agent(_))
        ));
    }
}
