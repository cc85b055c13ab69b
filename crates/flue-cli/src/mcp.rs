//! `flue mcp login|logout`: signing in to remote MCP servers that use OAuth, and out again.

use std::io::IsTerminal;
use std::path::Path;

use flue_host::{AgentSet, Env};

use crate::Exit;
use crate::args::McpServerArgs;
use crate::workspace::resolve_root;

/// Runs `flue mcp login`: the url goes to stderr (and to a browser on a desktop); the tokens
/// go to the workspace store, never to the terminal.
pub(crate) async fn login(args: &McpServerArgs) -> anyhow::Result<Exit> {
    let agents = crate::trust::ensure(agents(args)?)?;
    let server = args.server.as_str();
    let show_url = move |url: &str| {
        eprintln!("to sign in to mcp server `{server}`, open this url in a browser:\n\n  {url}\n");
        if std::io::stderr().is_terminal() {
            open_browser(url);
        }
        eprintln!("waiting for the browser to come back (5 minutes at most)...");
    };
    agents.login_mcp_server(server, &show_url).await?;
    eprintln!("signed in to mcp server `{server}`; the tokens are kept in the workspace store");
    Ok(Exit::Success)
}

/// Runs `flue mcp logout`.
pub(crate) fn logout(args: &McpServerArgs) -> anyhow::Result<Exit> {
    let agents = agents(args)?;
    let n_forgotten = agents.logout_mcp_server(&args.server)?;
    if n_forgotten == 0 {
        eprintln!("no stored tokens for mcp server `{}`", args.server);
    } else {
        eprintln!("signed out of mcp server `{}`", args.server);
    }
    Ok(Exit::Success)
}

fn agents(args: &McpServerArgs) -> anyhow::Result<AgentSet> {
    let root = resolve_root(args.root.as_deref())?;
    // Variables that are not UTF-8 cannot be keys or values here: left out.
    let vars = std::env::vars_os()
        .filter_map(|(key, value)| Some((key.into_string().ok()?, value.into_string().ok()?)));
    let env = Env::for_root(vars, &root, args.env_file.as_deref())?;
    Ok(crate::trust::apply(AgentSet::from_workspace(&root, env)?))
}

/// Opens `url` in the desktop's browser when there is one; the printed url is the fallback.
fn open_browser(url: &str) {
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    let found = std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| Path::new(&dir).join(opener).is_file())
    });
    if found {
        let _ = std::process::Command::new(opener)
            .arg(url)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
    }
}
