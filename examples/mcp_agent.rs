//! An agent that reaches its tools over MCP, through the gateway, against
//! `effectwatch demo`: it refunds an order and repeats itself as a model
//! does, then loses one reply on purpose. Run the demo, then paste the
//! "MCP gateway" command it prints (also in its `i` overlay) after `--`:
//!
//! cargo run --example mcp_agent -- effectwatch --config … gateway --policy … --upstream …
//!
//! The refund is made once; the lost one shows in the unknown pane.

use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation,
};
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use serde_json::json;

#[tokio::main]
async fn main() {
    let gateway: Vec<String> = std::env::args().skip(1).collect();
    if gateway.is_empty() {
        eprintln!(
            "usage: mcp_agent GATEWAY COMMAND… (the \"MCP gateway\" line `effectwatch demo` prints)"
        );
        std::process::exit(2);
    }
    if let Err(error) = run(&gateway).await {
        eprintln!("mcp_agent: {error}");
        std::process::exit(1);
    }
}

fn refund(order_id: &str, amount_minor: i64) -> CallToolRequestParams {
    let arguments = json!({"order_id": order_id, "amount_minor": amount_minor, "currency": "EUR"});
    CallToolRequestParams::new("refund")
        .with_arguments(arguments.as_object().cloned().unwrap_or_default())
}

fn said(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .rev()
        .find_map(|block| block.as_text().map(|text| text.text.clone()))
        .unwrap_or_default()
}

async fn session(
    words: &[String],
) -> Result<rmcp::service::RunningService<rmcp::service::RoleClient, ClientConfig>, String> {
    let transport = TokioChildProcess::new(tokio::process::Command::new(&words[0]).configure(
        |command| {
            command.args(&words[1..]);
        },
    ))
    .map_err(|error| format!("cannot start the gateway: {error}"))?;
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("mcp-agent-example", "1.0"),
    )
    .serve(transport)
    .await
    .map_err(|error| format!("the gateway did not start MCP: {error}"))
}

async fn run(gateway: &[String]) -> Result<(), String> {
    let run = chrono::Utc::now().format("%H%M%S");
    let order = format!("MCP-{run}");
    let agent = session(gateway).await?;
    for attempt in 1..=3 {
        let answer = agent
            .call_tool(refund(&order, 1250))
            .await
            .map_err(|e| e.to_string())?;
        println!("refund {order}, call {attempt}: {}", said(&answer));
    }
    let lookup = CallToolRequestParams::new("lookup_refunds").with_arguments(
        json!({"order_id": order})
            .as_object()
            .cloned()
            .unwrap_or_default(),
    );
    let held = agent.call_tool(lookup).await.map_err(|e| e.to_string())?;
    println!("the provider: {}", said(&held));
    let _ = agent.cancel().await;

    // The same gateway in front of a tool server that refunds and then
    // dies before answering: the reply is lost.
    let mut losing = gateway.to_vec();
    losing.push("--exit-after-refund".to_string());
    let agent = session(&losing).await?;
    let lost_order = format!("{order}-LOST");
    let answer = agent
        .call_tool(refund(&lost_order, 990))
        .await
        .map_err(|e| e.to_string())?;
    println!("refund {lost_order}: {}", said(&answer));
    let again = agent
        .call_tool(refund(&lost_order, 990))
        .await
        .map_err(|e| e.to_string())?;
    println!("refund {lost_order}, asked again: {}", said(&again));
    let _ = agent.cancel().await;
    println!(
        "In the console: refund:{lost_order}:990 is in the unknown pane; refund:{order}:1250 succeeded once, with two replays."
    );
    Ok(())
}
