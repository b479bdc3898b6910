//! clusterctl's variable syntax, enough for the scenarios' templates: `${VAR}`, `${VAR:=default}`,
//! `${VAR=default}` and `${VAR:-default}`. A variable with neither value nor default is an error naming it.

use std::collections::BTreeMap;

pub fn render(text: &str, vars: &BTreeMap<&str, String>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut missing = Vec::new();
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| format!("unterminated variable at {:?}", &rest[start..]))?;
        let expr = &after[..end];
        let (name, default) = match expr.find([':', '=']) {
            Some(i) => {
                let op_len = if expr[i..].starts_with(":=") || expr[i..].starts_with(":-") {
                    2
                } else {
                    1
                };
                (&expr[..i], Some(&expr[i + op_len..]))
            }
            None => (expr, None),
        };
        match (vars.get(name), default) {
            (Some(value), _) => out.push_str(value),
            (None, Some(default)) => out.push_str(default),
            (None, None) if !missing.iter().any(|m| m == name) => missing.push(name.to_owned()),
            (None, None) => {}
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    if missing.is_empty() {
        Ok(out)
    } else {
        Err(format!("variables without value: {}", missing.join(", ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_defaults_and_missing_variables() {
        let vars: BTreeMap<&str, String> = [("CLUSTER_NAME", "demo".to_owned())].into();
        assert_eq!(
            render("${CLUSTER_NAME}-cp-${GEN:=genc01} ${A=x} ${B:-y}", &vars).unwrap(),
            "demo-cp-genc01 x y"
        );
        assert_eq!(
            render("${NOPE} ${ALSO} ${NOPE}", &vars).unwrap_err(),
            "variables without value: NOPE, ALSO"
        );
    }
}
