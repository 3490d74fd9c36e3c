//! An Unleash strategy in flagstream's terms: the clauses a context must
//! match (its constraints, its segments, the strategy's own test), and a
//! percentage as the segment `<name>.strategy<i>` whose weighted rules keep
//! Unleash's normalised hash (seed 0, modulus 100), reading `userId`, else
//! `sessionId`, for the default stickiness.

use flagstream::model::{Bucketing, Clause, Operator, Segment, SegmentRule};
use serde_json::Value as Json;

use super::constraint::{attribute, clause, in_segment, present, segment};
use super::{Convert, Why, array, segment_key, str_of};

/// The segment true for a context with a `userId` (the default stickiness
/// reads `sessionId` only without one).
pub(super) const HAS_USER_ID: &str = "unleash-has-userId";

/// Whose value a percentage or a variant split hashes.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Stick {
    /// `userId`, else `sessionId`, else (Unleash) at random.
    Default,
    /// Unleash draws anew on every evaluation.
    Random,
    /// This field or property; without it, outside the percentage.
    Named(String),
}

pub(super) fn stickiness(param: Option<&str>) -> Result<Stick, Why> {
    Ok(match param {
        None | Some("") | Some("default") => Stick::Default,
        Some("random") => Stick::Random,
        Some(name) => Stick::Named(attribute(name)?),
    })
}

/// A strategy in flagstream's terms.
#[derive(Debug)]
pub(super) struct Strategy {
    /// 1-based position in the feature's strategies.
    pub(super) n: usize,
    /// What a context must match (empty: every context).
    pub(super) cond: Vec<Clause>,
    /// Unleash's `variants` field (absent: `None`).
    pub(super) variants: Option<Vec<Json>>,
    /// The variants' group (`groupId`, else the feature's name).
    pub(super) group: String,
    /// The variants' stickiness (the strategy's `stickiness`).
    pub(super) stick: Stick,
}

/// A strategy parameter (Unleash sends strings; numbers are taken too).
fn param(s: &Json, name: &str) -> Option<String> {
    match s.get("parameters")?.get(name)? {
        Json::String(v) => Some(v.clone()),
        Json::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// A percentage parameter: an integer from 0 to 100.
fn percent(s: &Json, name: &str) -> Result<Option<u32>, Why> {
    let Some(v) = param(s, name) else { return Ok(None) };
    match v.trim().parse::<u32>() {
        Ok(p) if p <= 100 => Ok(Some(p)),
        _ => Err(format!("parameter {name} {v:?}: not a whole percentage from 0 to 100")),
    }
}

impl Convert<'_> {
    /// One strategy; `None` when it never matches.
    pub(super) fn strategy(
        &mut self,
        name: &str,
        n: usize,
        s: &Json,
        segments: &mut Vec<Segment>,
    ) -> Result<Option<Strategy>, Why> {
        let owner = format!("{name}.strategy{n}");
        let (mut cond, never) = self.tests(s, &owner)?;
        if never {
            return Ok(None);
        }
        for id in array(s, "segments") {
            let key = segment_key(id);
            match self.segments.get(&key) {
                Some(Ok(())) => cond.push(in_segment(&key, false)),
                Some(Err(why)) => return Err(format!("segment {id} is not imported: {why}")),
                // Unleash: a strategy naming an unknown segment is false.
                None => return Ok(None),
            }
        }
        let group = param(s, "groupId").unwrap_or_else(|| name.to_owned());
        let kind = str_of(s, "name");
        // (percentage, whose value it hashes, group), for the strategies
        // that have one.
        let share: Option<(u32, Stick, String)> = match kind {
            "default" => None,
            "userWithId" => {
                self.scope.as_string("userId")?;
                let ids: Vec<Json> = param(s, "userIds")
                    .unwrap_or_default() // no parameter: no listed user
                    .split(',')
                    .map(str::trim)
                    .filter(|id| !id.is_empty())
                    .map(Json::from)
                    .collect();
                if ids.is_empty() {
                    return Ok(None); // no listed user: never true
                }
                cond.push(clause("userId".into(), Operator::In, ids, false));
                None
            }
            "remoteAddress" => {
                self.scope.as_string("remoteAddress")?;
                let ips: Vec<String> = param(s, "IPs")
                    .unwrap_or_default() // no parameter: no listed address
                    .split(',')
                    .map(|ip| ip.trim().to_owned())
                    .filter(|ip| !ip.is_empty())
                    .collect();
                if ips.is_empty() {
                    return Ok(None); // no listed address: never true
                }
                if let Some(range) = ips.iter().find(|ip| ip.contains('/')) {
                    return Err(format!("the address range {range:?}: flagstream has no CIDR test"));
                }
                cond.push(clause(
                    "remoteAddress".into(),
                    Operator::In,
                    ips.into_iter().map(Json::from).collect(),
                    false,
                ));
                None
            }
            "flexibleRollout" => {
                let Some(p) = percent(s, "rollout")? else { return Ok(None) };
                Some((p, stickiness(param(s, "stickiness").as_deref())?, group.clone()))
            }
            "gradualRolloutUserId" | "gradualRolloutSessionId" => {
                let Some(p) = percent(s, "percentage")? else { return Ok(None) };
                // Unleash's engine takes these only with a groupId.
                let Some(g) = param(s, "groupId") else { return Ok(None) };
                let by = if kind == "gradualRolloutUserId" { "userId" } else { "sessionId" };
                Some((p, Stick::Named(by.into()), g))
            }
            "gradualRolloutRandom" => {
                let Some(p) = percent(s, "percentage")? else { return Ok(None) };
                Some((p, Stick::Random, group.clone()))
            }
            "applicationHostname" => {
                return Err("applicationHostname tests the SDK's host, not the context: flagstream evaluates the context alone".into());
            }
            "__internal-strategy-group" => {
                return Err("a strategy group (strategies combined with AND/OR): not imported yet".into());
            }
            other => {
                return Err(format!("the custom strategy {other:?}: its code runs in Unleash's SDKs only"));
            }
        };
        if let Some((p, stick, group)) = share {
            match (p, &stick) {
                (0, _) => return Ok(None),
                (100, Stick::Default | Stick::Random) => {}
                (100, Stick::Named(by)) => {
                    self.scope.as_string(by)?;
                    cond.push(present(by));
                }
                (p, stick) => {
                    let rules = self.share_rules(&owner, p, stick, &group, cond)?;
                    segments.push(segment(&owner, rules));
                    cond = vec![in_segment(&owner, false)];
                }
            }
        }
        Ok(Some(Strategy {
            n,
            cond,
            variants: s.get("variants").and_then(Json::as_array).cloned(),
            group: param(s, "groupId").unwrap_or_else(|| name.to_owned()),
            stick: stickiness(param(s, "stickiness").as_deref())?,
        }))
    }

    /// A percentage of contexts matching `cond`, as weighted segment rules.
    fn share_rules(
        &mut self,
        key: &str,
        p: u32,
        stick: &Stick,
        group: &str,
        cond: Vec<Clause>,
    ) -> Result<Vec<SegmentRule>, Why> {
        let weighted = |clauses: Vec<Clause>, by: &str, bucketing: Option<Bucketing>| SegmentRule {
            id: String::new(),
            clauses,
            weight: Some(p * 1000),
            bucket_by: by.to_owned(),
            rollout_context_kind: String::new(),
            bucketing,
        };
        let unleash = || Some(Bucketing::Unleash { group: group.to_owned(), seed: 0, modulus: 100 });
        Ok(match stick {
            Stick::Named(by) => {
                self.scope.as_string(by)?;
                vec![weighted(cond, by, unleash())]
            }
            Stick::Default => {
                self.scope.as_string("userId")?;
                self.scope.as_string("sessionId")?;
                let mut without_user = cond.clone();
                without_user.push(in_segment(HAS_USER_ID, true));
                vec![weighted(cond, "userId", unleash()), weighted(without_user, "sessionId", unleash())]
            }
            Stick::Random if self.approximate => {
                self.approximations.push(format!(
                    "{key}: Unleash's random {p}% (a new draw on every evaluation) as a steady {p}% of context keys"
                ));
                vec![weighted(cond, "", None)]
            }
            Stick::Random => {
                return Err(format!(
                    "random stickiness at {p}%: Unleash draws anew on every evaluation, so no context keeps an answer (--approximate: a steady {p}% of context keys)"
                ));
            }
        })
    }
}
