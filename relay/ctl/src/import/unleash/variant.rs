//! An Unleash feature's variants as its `<name>.variant` flag: the value
//! Unleash's `getVariant` returns for each variant, overrides as rules,
//! and weighted splits keeping Unleash's variant hashing (seed 86028157,
//! the total weight as the modulus).

use flagstream::model::{Bucketing, Clause, Operator, Rollout, Serve, WeightedVariation};
use serde_json::{Value as Json, json};

use super::constraint::{attribute, clause, present};
use super::strategy::{Stick, stickiness};
use super::{Convert, Rules, Why, array, str_of};

/// Unleash's seed for variant hashing (its strategies hash with 0).
const VARIANT_SEED: u32 = 86_028_157;

/// flagstream's weight total.
const WEIGHT_TOTAL: u32 = 100_000;

/// A variant as its flag's variation: what Unleash's `getVariant` returns.
pub(super) fn variant_value(v: &Json) -> Json {
    let mut out = json!({"name": str_of(v, "name"), "enabled": true, "feature_enabled": true});
    if let Some(p) = v.get("payload").filter(|p| !p.is_null()) {
        out["payload"] = p.clone();
    }
    out
}

impl Convert<'_> {
    /// The feature's own variants after `prefix`: overrides, then the split.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn feature_variants(
        &mut self,
        name: &str,
        f: &Json,
        id: &str,
        prefix: &[Clause],
        values: &mut Vec<Json>,
        rules: &mut Rules,
    ) -> Result<(), Why> {
        let list = array(f, "variants");
        if list.is_empty() {
            rules.add(format!("{id}-none"), prefix.to_vec(), Serve::variation(1));
            return Ok(());
        }
        for (vi, v) in list.iter().enumerate() {
            for (j, o) in array(v, "overrides").iter().enumerate() {
                let at = |e: Why| format!("variant {:?}, override {}: {e}", str_of(v, "name"), j + 1);
                let attr = attribute(str_of(o, "contextName")).map_err(at)?;
                self.scope.as_string(&attr).map_err(at)?;
                let listed: Vec<Json> = array(o, "values").to_vec();
                if listed.is_empty() {
                    continue; // no listed value: never applies
                }
                let index = index_of(values, variant_value(v));
                let mut clauses = prefix.to_vec();
                clauses.push(clause(attr, Operator::In, listed, false));
                rules.add(format!("{id}-override-{}-{}", vi + 1, j + 1), clauses, Serve::variation(index));
            }
        }
        let stick = stickiness(list.first().and_then(|v| v.get("stickiness")).and_then(Json::as_str))
            .map_err(|e| format!("variants' stickiness: {e}"))?;
        self.split(id, prefix, list, name, &stick, values, rules)
    }

    /// A weighted split of `list` by Unleash's variant hashing.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn split(
        &mut self,
        id: &str,
        prefix: &[Clause],
        list: &[Json],
        group: &str,
        stick: &Stick,
        values: &mut Vec<Json>,
        rules: &mut Rules,
    ) -> Result<(), Why> {
        let weights = list
            .iter()
            .map(|v| {
                v.get("weight").and_then(Json::as_u64).and_then(|w| u32::try_from(w).ok()).ok_or_else(|| {
                    format!("variant {:?}: weight is not a non-negative integer", str_of(v, "name"))
                })
            })
            .collect::<Result<Vec<u32>, Why>>()?;
        let total: u64 = weights.iter().map(|&w| u64::from(w)).sum();
        let Some(total) = u32::try_from(total).ok().filter(|&t| t > 0 && WEIGHT_TOTAL.is_multiple_of(t))
        else {
            return Err(format!(
                "variant weights total {total}: flagstream reproduces Unleash's split only for a total dividing 100000 (Unleash's own total is 1000)"
            ));
        };
        let scale = WEIGHT_TOTAL / total;
        let variations: Vec<WeightedVariation> = list
            .iter()
            .zip(&weights)
            .map(|(v, w)| WeightedVariation {
                variation: index_of(values, variant_value(v)),
                weight: w * scale,
            })
            .collect();
        let rollout = |by: &str| {
            Serve::rollout(Rollout {
                bucket_by: by.to_owned(),
                context_kind: String::new(),
                seed: None,
                variations: variations.clone(),
                bucketing: Some(Bucketing::Unleash {
                    group: group.to_owned(),
                    seed: VARIANT_SEED,
                    modulus: total,
                }),
            })
        };
        match stick {
            Stick::Default => {
                let at = |e: Why| format!("variants' stickiness: {e}");
                self.scope.as_string("userId").map_err(at)?;
                self.scope.as_string("sessionId").map_err(at)?;
                let mut with_user = prefix.to_vec();
                with_user.push(present("userId"));
                rules.add(format!("{id}-by-userId"), with_user, rollout("userId"));
                rules.add(format!("{id}-by-sessionId"), prefix.to_vec(), rollout("sessionId"));
            }
            // Unleash reads a property named "random" here (none: the
            // first variant with a weight, as flagstream's missing value).
            Stick::Random => rules.add(format!("{id}-split"), prefix.to_vec(), rollout("random")),
            Stick::Named(by) => {
                self.scope.as_string(by).map_err(|e| format!("variants' stickiness: {e}"))?;
                rules.add(format!("{id}-split"), prefix.to_vec(), rollout(by));
            }
        }
        Ok(())
    }
}

/// The index of `v` among `values`, added when new.
pub(super) fn index_of(values: &mut Vec<Json>, v: Json) -> u32 {
    match values.iter().position(|x| *x == v) {
        Some(i) => i as u32,
        None => {
            values.push(v);
            (values.len() - 1) as u32
        }
    }
}
