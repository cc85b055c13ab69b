//! How hard a bearer token is to guess, estimated from the token alone: what a guesser who
//! tries repeated characters, runs (`1234`, `abcd`, `9876`), repeated chunks and common words
//! first would need, not what its length suggests. `password12345678` and sixteen identical
//! characters are as long as a random hex token of 64 bits, and are guessed at once.
//!
//! The estimate: each character outside those patterns adds the bits of the smallest alphabet
//! the token is written in (hex digits 4, digits 3.3, one letter case 4.7, letters and digits
//! 5.95, any printable ASCII 6.57); a character repeating the one before it, continuing a run
//! by one code point up or down, or in a three-character chunk seen before adds nothing;
//! each common word adds [`WORD_BITS`]. Random tokens lose a little to chance runs; that is
//! the price of catching the made-up ones.

/// What one common word found in a token is worth, in bits (a pick from a short list, with
/// the variants people make of it).
const WORD_BITS: f64 = 10.0;

/// Words and keyboard rows people build tokens from (lowercase; matched in any case). A word
/// comes before the shorter words inside it (`password` before `pass`), so that it counts as
/// one word.
const COMMON_WORDS: &[&str] = &[
    "password", "passw0rd", "iloveyou", "welcome", "letmein", "changeme", "default", "monkey",
    "dragon", "master", "secret", "sunshine", "princess", "football", "baseball", "shadow",
    "superman", "trustno1", "access", "admin", "login", "token", "hello", "qwerty", "qwertz",
    "azerty", "asdfgh", "zxcvbn", "qazwsx", "abc123", "flue", "test", "pass", "root", "user",
    "guest", "asdf", "zxcv", "1qaz",
];

/// The estimated bits of `token` (see the module docs).
pub(crate) fn estimated_bits(token: &str) -> f64 {
    let lower: Vec<char> = token.to_ascii_lowercase().chars().collect();
    let in_word = word_cover(&lower);
    let n_free = (0..lower.len())
        .filter(|&idx| in_word[idx].is_none() && !is_predictable(&lower, idx))
        .count();
    let as_bits = |count: usize| f64::from(u32::try_from(count).unwrap_or(u32::MAX));
    as_bits(n_free) * alphabet_bits(token) + as_bits(count_words(&in_word)) * WORD_BITS
}

/// For each character, the index of the common word covering it (the first found, longest
/// words first), if any.
fn word_cover(lower: &[char]) -> Vec<Option<usize>> {
    let mut cover = vec![None; lower.len()];
    let mut n_found = 0;
    for word in COMMON_WORDS {
        let word: Vec<char> = word.chars().collect();
        let mut start = 0;
        while start + word.len() <= lower.len() {
            let span = start..start + word.len();
            if lower[span.clone()] == word[..] && cover[span.clone()].iter().all(Option::is_none) {
                cover[span]
                    .iter_mut()
                    .for_each(|slot| *slot = Some(n_found));
                n_found += 1;
                start += word.len();
            } else {
                start += 1;
            }
        }
    }
    cover
}

/// How many words [`word_cover`] found.
fn count_words(cover: &[Option<usize>]) -> usize {
    cover.iter().flatten().max().map_or(0, |last| last + 1)
}

/// Whether the character at `idx` follows from the others: the same character as the one
/// before, the next or previous code point (a run), or part of a three-character chunk that
/// appeared earlier (a repeat).
fn is_predictable(lower: &[char], idx: usize) -> bool {
    if idx > 0 && u32::from(lower[idx]).abs_diff(u32::from(lower[idx - 1])) <= 1 {
        return true;
    }
    (idx.saturating_sub(2)..=idx).any(|start| {
        lower.get(start..start + 3).is_some_and(|chunk| {
            // The windows starting before `start`.
            lower[..start + 2]
                .windows(3)
                .any(|earlier| earlier == chunk)
        })
    })
}

/// The bits of one character drawn from the smallest alphabet `token` fits in.
fn alphabet_bits(token: &str) -> f64 {
    let all = |test: fn(&char) -> bool| token.chars().all(|c| test(&c));
    let size: f64 = if all(char::is_ascii_digit) {
        10.0
    } else if all(char::is_ascii_hexdigit)
        && (all(|c| !c.is_ascii_uppercase()) || all(|c| !c.is_ascii_lowercase()))
    {
        16.0
    } else if all(char::is_ascii_lowercase) || all(char::is_ascii_uppercase) {
        26.0
    } else if all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        || all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
    {
        36.0
    } else if all(char::is_ascii_alphanumeric) {
        62.0
    } else {
        // Every visible ASCII character (a token holds nothing else).
        94.0
    };
    size.log2()
}
