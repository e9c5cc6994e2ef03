//! `agdx examples`: annotated examples to copy.

/// The annotated examples.
pub const EXAMPLES: &str = r#"AGDX examples: copy these into two shells. Without --log, everything uses the
embedded log in ./.agdx (no server needed); add --log iggy://iggy:iggy@HOST:8090
to use an Apache Iggy server, or --log kafka://HOST:9092,HOST2:9092 to use a
Kafka-protocol cluster instead (see example 13 below).

1. Ask an agent and get the reply (send -> worker -> reply)
   shell 1:  agdx worker --agent echo --echo
             # the worker answers every command to agent 'echo' with its own body
   shell 2:  agdx ask --to echo --operation hello "hi"
             hi
             # exit 0; the command went to agent.commands, the reply came back
             # on agent.responses with the same correlation id

2. Run your own program as the handler
   shell 1:  agdx worker --agent upper --exec 'tr a-z A-Z'
             # body on stdin, reply = stdout; env: AGDX_OPERATION, AGDX_CONVERSATION,
             # AGDX_CORRELATION, AGDX_RECORD, AGDX_SOURCE, AGDX_IDEMPOTENCY_KEY
   shell 2:  agdx ask --to upper --operation shout "quiet please"
             QUIET PLEASE

3. An operation the agent does not handle
   shell 1:  agdx worker --agent calendar --exec './calendar.sh' --operation list --operation add
   shell 2:  agdx ask --to calendar --operation delete "event 7"
             agdx: error unsupported: no handler for operation 'delete' on agent 'calendar'; it handles: add, list
             # exit 3: the agent answered with an error

4. A failing handler and its dead letter
   shell 1:  agdx worker --agent flaky --exec 'echo "database is down" >&2; exit 75' --max-attempts 3
             # exit 75 means "try again": the worker retries with backoff, then gives up
   shell 2:  agdx ask --to flaky --operation save "order 42"
             agdx: error internal: database is down
             # exit 3; the original command is kept verbatim on agent.dlq:
   shell 2:  agdx tail --topic agent.dlq
             {"topic":"agent.dlq",...,"dead_letter":{"source":"0/3/5/0","reason":"retry_exhausted","attempts":3,...,"payload":{"kind":"command",...}}}

5. A streamed reply, printed as it arrives
   shell 1:  agdx worker --agent story --stream-output lines --exec 'for w in once upon a time; do echo "$w"; sleep 0.3; done'
             # each line the program prints is a chunk as soon as it is written; a library
             # handler streams with request.stream(StreamPurpose::Chat, None), send(..), finish(..)
   shell 2:  agdx ask --to story --operation tell "go"

6. Exactly-once effects with an idempotency key
   shell 2:  agdx ask --to upper --operation shout --idempotency-key order-42 "pay"
             PAY
   shell 2:  agdx ask --to upper --operation shout --idempotency-key order-42 "pay"
             PAY
             # the second time the handler does not run; the stored reply is published again

7. Fire and forget, then watch the log
   shell 2:  agdx send --to echo --operation hello "later"
             record=01J... correlation=01J... conversation=01J... partition=5
   shell 2:  agdx tail --follow
             # every record as one JSON line: topic, partition, offset, timestamp, envelope

8. Many commands from a file
   shell 2:  printf '{"to":"echo","operation":"hello","body":"a"}\n{"to":"echo","operation":"hello","body":{"n":2}}\n' | agdx send --jsonl -
             sent 2 commands

9. See it all in one command
   shell 1:  agdx demo
             # a worker pool in this process on a throwaway log; prints what happens,
             # then the timeline, causal graph, dead letter and live agents
   shell 1:  agdx demo --keep demo-log && export AGDX_LOG=embedded:demo-log
             # keep the log to try the commands below on it

10. Replay a conversation and its causal graph
   shell 2:  agdx timeline 01J...CONVERSATION
             # every record of the conversation in log order; replies show their latency
   shell 2:  agdx timeline 01J...CONVERSATION --since 10m --follow
   shell 2:  agdx graph 01J...RECORD --down
             # what the record caused, as a tree; --up for its causes
   shell 2:  agdx graph 01J...RECORD --format mermaid > graph.mmd
             # or --format dot | dot -Tsvg > graph.svg

11. Dead letters: inspect, fix, redrive
   shell 2:  agdx dlq list --agent flaky
             ID       SET ASIDE (UTC)             REASON             TRY  AGENT        OPERATION    REDRIVEN
             3/0      2026-...Z                   retry_exhausted      3  flaky        save         no
   shell 2:  agdx dlq show 3/0
   shell 1:  # restart the worker with the fix, then:
   shell 2:  agdx dlq redrive 3/0
             redriven 3/0 → agent.commands partition 3
             # the original bytes, unchanged; again is a no-op unless --force

12. Who is running, and how it is doing
   shell 1:  agdx worker --agent echo --echo --metrics 127.0.0.1:9464
   shell 2:  agdx agents --watch
             # agents with a fresh card: operations, members, last seen
   shell 2:  curl -s 127.0.0.1:9464/metrics | grep agdx_
   shell 2:  agdx ask --to nobody --operation x "hi"
             agdx: no live worker for agent 'nobody' seen on embedded:.agdx — the command waits on the log; ...
             # it names the log and how to start a worker on it: a worker started in
             # another directory without --log uses the .agdx of that directory

13. The same on a Kafka cluster (three brokers: docker compose -f deploy/kafka-compose.yml up -d)
   shell 1:  export AGDX_LOG=kafka://127.0.0.1:19092,127.0.0.1:29092,127.0.0.1:39092
             agdx init
             agdx worker --agent echo --echo
   shell 2:  agdx --log kafka://127.0.0.1:19092,127.0.0.1:29092,127.0.0.1:39092 ask --to echo --operation hello "hi"
             hi
             # start a second worker in shell 3: the group rebalances, and the first one
             # finishes and commits what it has in hand before it gives a partition up

14. An AX agent calling agents on the log (the ax-ipc bridge)
   shell 1:  agdx worker --agent memory --echo
   shell 2:  agdx bridge ax-ipc --socket /tmp/ax.sock --route 'memory_*=memory'
             # plays the AX host: 4-byte big-endian length + JSON frames, strict
             # per-action schemas (agdx bridge ax-ipc schemas DIR writes them out)
   shell 3:  python3 -c '
             import json, socket, struct
             s = socket.socket(socket.AF_UNIX); s.connect("/tmp/ax.sock")
             call = json.dumps({"action": "memory_list", "scope": "notes", "_msgId": "1"}).encode()
             s.sendall(struct.pack(">I", len(call)) + call)
             n = struct.unpack(">I", s.recv(4))[0]; print(s.recv(n).decode())'
             {"ok":true,"action":"memory_list","scope":"notes","_msgId":"1"}
             # the echo agent answered with the command's body; an undeclared field gets
             # {"ok":false,"error":"Validation failed for action \"memory_list\": ..."}

15. The same over HTTP, with a token minted per turn
   shell 2:  agdx bridge ax-ipc token --secret ipc.secret --ttl 10m
             axipc1.1767225600.5f0c...
   shell 2:  agdx bridge ax-ipc --http 127.0.0.1:8787 --token-secret ipc.secret --route 'memory_*=memory'
   shell 3:  curl -s -H "Authorization: Bearer axipc1.1767225600.5f0c..." \
               -d '{"action":"memory_list","scope":"notes"}' http://127.0.0.1:8787/internal/ipc
             {"ok":true,"action":"memory_list","scope":"notes"}
             # no or a wrong token: 401 {"error":"invalid token"}

16. IOA clients on the log: an IOA server whose only store is the log
   shell 1:  agdx bridge ioa --listen 127.0.0.1:8765 --access-key KEY
   shell 2:  curl -s -X POST 127.0.0.1:8765/auth/register -d '{"name":"alice","access_key":"KEY"}'
             {"id":"alice","name":"alice","token":"02b8…"}
   shell 2:  curl -s -X POST 127.0.0.1:8765/spaces -H 'X-Access-Key: KEY' -H 'Authorization: Bearer 02b8…' \
               -d '{"name":"incident-42","description":"on call"}'
             {"id":"6TWV5NE4245KJQSX69V6HQ848Y","name":"incident-42",...}
   shell 2:  curl -s -X POST 127.0.0.1:8765/spaces/6TWV5NE4245KJQSX69V6HQ848Y/messages \
               -H 'Authorization: Bearer 02b8…' -d '{"content":{"text":"disk full"}}'
   shell 3:  curl -sN '127.0.0.1:8765/spaces/6TWV5NE4245KJQSX69V6HQ848Y/messages?listen=true&all=true' \
               -H 'Authorization: Bearer 02b8…'
             # event: message / id: <message id> / data: <message JSON>; reconnect with
             # -H 'Last-Event-ID: <id>' to go on after it; MCP tools at /mcp with the token
   shell 2:  agdx graph 01M8...MESSAGE --down
             # the messages are events on agent.commands: the log tools read them

17. Trust: signed commands, a verifying worker, quarantine and its lift
   shell 2:  export AGDX_KEYS=keys.json      # the key registry (trusted configuration)
             agdx keys generate --principal ops   --kind operator --registry keys.json --out ops.key
             agdx keys generate --principal echo  --kind agent    --registry keys.json --out echo.key --valid-for 90d
             agdx keys generate --principal alice --kind agent    --registry keys.json --out alice.key
             # secret key files are written with mode 0600; `agdx keys list` shows the registry
   shell 1:  export AGDX_KEYS=keys.json
             agdx worker --agent echo --echo --verify --key echo.key
             # handles only commands signed by an enrolled key; signs its replies
   shell 2:  agdx ask --to echo --operation hello --key alice.key --verify "hi"
             hi
             agdx ask --to echo --operation hello "unsigned"
             agdx: error unauthorized: agent 'echo' accepts only commands signed by an enrolled key: the record is unsigned; ...
             agdx quarantine echo --key ops.key --reason "leaking secrets"
             agdx ask --to echo --operation hello --key alice.key "hi"
             agdx: error quarantined: agent 'echo' is quarantined by 'ops' since 2025-06-01T12:03:10.172843Z (leaking secrets)
             # exit 3, nothing sent; the worker in shell 1 pauses (membership kept)
             agdx quarantine --list
             agdx unquarantine echo --key ops.key
             agdx ask --to echo --operation hello --key alice.key "back"
             back
             agdx tail --topic agent.responses --verify
             # each line gains "verified": true|false and "signer": {key_id, principal, kind}
   grants:   agdx worker --agent docs --echo --verify --allow ops:* --allow alice:summarize
             # others get `error unauthorized: forbidden: 'x' holds no grant for operation 'y' ...`

18. AXON agents and agents on the log (agdx bridge axon)
   # a key for the bridge: 32 random bytes as hex, owner-only
   shell 2:  head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > bridge.key && chmod 600 bridge.key
   # the AXON daemon's token and agent id
   shell 2:  axon identity --json --addr 127.0.0.1:7101
             "agent_id": "ed25519.4f07...", "uri": "axon://QHETNQ...@127.0.0.1:7101"
   shell 2:  agdx bridge axon --key bridge.key --listen 127.0.0.1:7100 --peer axon://QHETNQ...@127.0.0.1:7101 \
                 --route family=home --default-agent echo --expose remote=ed25519.4f07...
             axon://kPqDIO...@127.0.0.1:7100
             # its token, for the daemon; stderr names its agent id (ed25519.7273...)
   shell 3:  axon connect axon://kPqDIO...@127.0.0.1:7100 && axon daemon --port 7101 --disable-mdns &
   shell 3:  axon request ed25519.7273... "hello"
             {"ok": true, "response": {"kind": "response", "payload": {"message": "hello"}, ...}}
             # the request became a command to 'echo' (no payload.domain; "family.*" would
             # go to 'home'), its payload the JSON body, and the worker's reply came back
   shell 3:  agdx ask --to remote --operation lookup --content-type json '{"q":1}'
             agdx: error unsupported: AXON peer ed25519.4f07... answered error 'unhandled': ...
             # the bridge answers for 'remote' by asking the AXON daemon, which has no handler

19. Long work: follow it, cancel it, say what it cost
   shell 1:  agdx worker --agent llm --exec './complete.sh; echo "{\"usage\": {\"input_tokens\": 812, \"output_tokens\": 64}}" >> "$AGDX_REPORT"'
             # the program reports through the file AGDX_REPORT names: progress, usage,
             # finish_reason, metadata (one JSON object a line)
   shell 2:  agdx ask --to llm --operation complete --follow "a haiku about logs"
             … task submitted (0.0 s)
             … task working (0.1 s)
             usage: 812 tokens in, 64 out
             # Ctrl-C, or --timeout running out, cancels the command: its program gets SIGTERM
             # (SIGKILL after the worker's --cancel-grace); --no-cancel leaves it running
   shell 2:  agdx send --to llm --operation complete "a long essay"
             record=01J... correlation=01J... conversation=01J... partition=2
   shell 2:  agdx cancel 01J...RECORD
             cancelled record=01J... correlation=01J... operation=complete by=cli cancel=01J...
   shell 2:  agdx context 01J...CONVERSATION --last 20 --budget 4000 --json
             # the conversation's turns for a prompt (user, assistant, tool), newest within budget

20. A2A clients and agents on the log (agdx bridge a2a)
   shell 1:  agdx worker --agent echo --echo --operation hello
   shell 2:  agdx bridge a2a --listen 127.0.0.1:8766
             agdx bridge a2a: serving http://127.0.0.1:8766/agents (A2A JSON-RPC, SSE) ...
   shell 3:  curl -s 127.0.0.1:8766/agents/echo/.well-known/agent-card.json
             {"name":"echo",...,"skills":[{"id":"hello",...}],"capabilities":{"streaming":true,...}}
   shell 3:  curl -s 127.0.0.1:8766/agents/echo/ -d '{"jsonrpc":"2.0","id":1,"method":"SendMessage",
               "params":{"message":{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}]}}}'
             {"jsonrpc":"2.0","id":1,"result":{"task":{"id":"01J...CONVERSATION.01J...CORRELATION",
              "status":{"state":"TASK_STATE_COMPLETED",...},"artifacts":[{"artifactId":"reply","parts":[{"text":"hi"}]}]}}}
             # SendStreamingMessage answers over SSE (artifact updates from chunks); GetTask
             # reads the task from the log, CancelTask cancels it; docs/bridge-a2a.md

21. MCP clients calling the live agents (agdx bridge mcp)
   shell 1:  agdx worker --agent calc --echo --operation add
             # a worker that names its operations offers them as tools
   shell 2:  agdx bridge mcp token --secret mcp.secret --ttl 1h
             agdxmcp1.1767225600.9b1e...
   shell 2:  agdx bridge mcp --listen 127.0.0.1:8767 --token-secret mcp.secret
             agdx bridge mcp: serving http://127.0.0.1:8767/mcp
             # tools: calc.add (AGENT.OPERATION), the list following agents as they come
             # and go; a call is a command, its reply the result (a JSON object as
             # structured content, an error reply a tool error with the AGDX code),
             # chunks and task states arrive as progress, cancelling cancels the command
   shell 3:  pip install mcp && python3 -c '
             import anyio, httpx2
             from mcp import Client
             from mcp.client.streamable_http import streamable_http_client
             async def main():
                 http = httpx2.AsyncClient(headers={"Authorization": "Bearer agdxmcp1.1767225600.9b1e..."})
                 async with http, Client(streamable_http_client("http://127.0.0.1:8767/mcp", http_client=http)) as c:
                     print([t.name for t in (await c.list_tools()).tools])
                     print((await c.call_tool("calc.add", {"a": 2, "b": 40})).structured_content)
             anyio.run(main)'
             ['calc.add']
             {'a': 2, 'b': 40}
             # a local client starts `agdx bridge mcp --stdio` itself instead (no token)

Exit codes of `agdx ask`: 0 reply printed, 3 the agent answered with an error
(or is quarantined), 4 no reply in time (--timeout), 130 interrupted (Ctrl-C),
1 anything else (message on stderr).
"#;

pub fn run() {
    print!("{EXAMPLES}");
}
