//! "Did you mean ...?" suggestions for misspelt keys, values and names.

/// ` (did you mean `candidate`?)` for the candidate closest to `word`, or an empty string when
/// none is close enough.
pub(crate) fn did_you_mean<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> String {
    match closest(word, candidates) {
        Some(candidate) => format!(" (did you mean `{candidate}`?)"),
        None => String::new(),
    }
}

/// The model specifier `spec` most likely meant, among providers `known`: a bare model id
/// gets the provider its name suggests (`gpt-4o` -> `openai/gpt-4o`), a misspelt provider the
/// closest known one (`opnai/gpt-4o` -> `openai/gpt-4o`). `None` when nothing fits.
///
/// ```
/// let known = ["anthropic", "openai", "scripted"];
/// assert_eq!(flue_build::suggest_model("gpt-4o", &known).as_deref(), Some("openai/gpt-4o"));
/// assert_eq!(flue_build::suggest_model("opnai/gpt-4o", &known).as_deref(), Some("openai/gpt-4o"));
/// assert_eq!(flue_build::suggest_model("claude-sonnet-4-6", &known).as_deref(), Some("anthropic/claude-sonnet-4-6"));
/// assert_eq!(flue_build::suggest_model("mystery", &known), None);
/// ```
pub fn suggest_model(spec: &str, known: &[&str]) -> Option<String> {
    match spec.split_once('/') {
        Some((provider, model)) if !model.is_empty() => {
            let provider = closest(provider, known.iter().copied())?;
            Some(format!("{provider}/{model}"))
        }
        Some(_) => None,
        None => {
            let model = spec.trim();
            let by_prefix: &[(&str, &str)] = &[
                ("gpt", "openai"),
                ("chatgpt", "openai"),
                ("o1", "openai"),
                ("o3", "openai"),
                ("o4", "openai"),
                ("claude", "anthropic"),
                ("mistral", "mistral"),
                ("codestral", "mistral"),
                ("grok", "xai"),
                ("deepseek", "deepseek"),
            ];
            let provider = by_prefix
                .iter()
                .find(|(prefix, provider)| {
                    model.to_ascii_lowercase().starts_with(prefix) && known.contains(provider)
                })
                .map(|(_, provider)| *provider)?;
            Some(format!("{provider}/{model}"))
        }
    }
}

/// The name among `candidates` that `word` most likely misspells (a small edit distance), if
/// any; `word` itself is never suggested.
///
/// ```
/// let models = ["claude-sonnet-4-5", "claude-haiku-4-5"];
/// assert_eq!(flue_build::suggest_name("claude-sonet-4-5", models), Some("claude-sonnet-4-5"));
/// assert_eq!(flue_build::suggest_name("gpt-9", models), None);
/// ```
pub fn suggest_name<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    closest(word, candidates)
}

/// The candidate with the smallest edit distance to `word`, if that distance is small for the
/// candidate's length (one edit per three characters, at least one). Ties go to the first.
pub(crate) fn closest<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let mut best: Option<(usize, &str)> = None;
    for candidate in candidates {
        if candidate == word {
            continue;
        }
        let distance = edit_distance(word, candidate);
        let limit = (candidate.chars().count() / 3).max(1);
        if distance <= limit && best.is_none_or(|(best_distance, _)| distance < best_distance) {
            best = Some((distance, candidate));
        }
    }
    best.map(|(_, candidate)| candidate)
}

/// Edit distance counting insertions, deletions, substitutions and swaps of two neighbouring
/// characters (optimal string alignment).
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // rows[i][j]: distance between a[..i] and b[..j].
    let mut rows = vec![vec![0_usize; b.len() + 1]; a.len() + 1];
    for (i, row) in rows.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in rows[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut distance = (rows[i - 1][j] + 1)
                .min(rows[i][j - 1] + 1)
                .min(rows[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                distance = distance.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = distance;
        }
    }
    rows[a.len()][b.len()]
}
