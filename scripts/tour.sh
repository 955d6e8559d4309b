#!/usr/bin/env bash
# Runs the README's tour, command for command, against a fresh `chio up` in
# a temporary directory (on spare ports), and fails if any step does.
set -euo pipefail
# has PATTERN...: grep -q that reads its input to the end. grep -q stops at
# the first match, and the writer of a longer output then dies of SIGPIPE,
# which pipefail turns into a failed step.
has() { grep "$@" >/dev/null; }
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
http=${TOUR_HTTP:-127.0.0.1:18080}
natsaddr=${TOUR_NATS:-127.0.0.1:14222}
cleanup() {
  status=$?
  if [ "$status" -ne 0 ] && [ -f "$work/up.log" ]; then echo "tour: FAILED ($status); chio up's log:"; tail -40 "$work/up.log"; fi
  for pid in ${bridge_pid:-} ${protect_pid:-} ${adapter_pid:-} ${oidc_pid:-}; do kill -INT "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true; done
  [ -n "${edge_pid:-}" ] && kill -INT "$edge_pid" 2>/dev/null && wait "$edge_pid" 2>/dev/null || true
  [ -n "${up_pid:-}" ] && kill -INT "$up_pid" 2>/dev/null && wait "$up_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

cd "$repo"
go build -o "$work/bin/chio" ./cmd/chio
cp -r examples "$work/examples"
cd "$work"
bin/chio up --listen "$http" --nats-listen "$natsaddr" > up.log 2>&1 &
up_pid=$!
# A loaded machine may take a while to start it: up to a minute.
for _ in $(seq 600); do curl -sf "http://$http/log/checkpoint" >/dev/null && [ -f .chio/operator.token ] && break; sleep 0.1; done

OP="Authorization: Bearer $(cat .chio/operator.token)"
bin/chio emit --nats "nats://$natsaddr" --nats-nkey .chio/nats-creds/edge.nk --edge-key .chio/keys/edge.key --edge-credential .chio/keys/edge.cred --count 2 | tee ids.txt
ID=$(head -1 ids.txt)
for _ in $(seq 100); do [ "$(curl -s -o /dev/null -w '%{http_code}' -H "$OP" "http://$http/v1/receipts/$ID")" = 200 ] && break; sleep 0.1; done

curl -sf "http://$http/log/checkpoint" > checkpoint.txt
curl -sf -H "$OP" "http://$http/v1/receipts/$ID" > receipt.json
curl -sf -H "$OP" "http://$http/v1/receipts/$ID/inclusion-proof?tree_size=$(sed -n 2p checkpoint.txt)" > proof.json
curl -sf "http://$http/v1/log/keys"; echo

bin/chio verify --receipt receipt.json --proof proof.json --checkpoint checkpoint.txt \
  --vkey .chio/keys/checkpoint.vkey --kernel-key "$(cat .chio/keys/kernel.pub)"

curl -sf -H "$OP" "http://$http/v1/receipts/$ID/tlog-proof" > receipt.tlog-proof
bin/chio verify --receipt receipt.json --proof receipt.tlog-proof \
  --vkey .chio/keys/checkpoint.vkey --kernel-key "$(cat .chio/keys/kernel.pub)"

curl -sf -H "$OP" "http://$http/v1/receipts/query?toolServer=hello&outcome=deny&limit=10" | has '"totalCount":1'
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://$http/v1/receipts/$ID")" = 401 ]
bin/chio ledger rebuild --nats "nats://$natsaddr" --nats-nkey .chio/nats-creds/reader.nk --edge-issuer .chio/keys/issuer.pub --data-dir "$work/rebuilt" --keys .chio/keys | tee rebuild.txt
grep -q '^size 2$' rebuild.txt
bin/chio ledger check --data-dir "$work/rebuilt" --keys .chio/keys | tee check.txt | has '^ledger check: OK: size 2,'
[ "$(tail -2 check.txt)" = "$(tail -2 rebuild.txt)" ]

bin/chio evidence export --url "http://$http" --token @.chio/operator.token --out evidence
bin/chio evidence verify --input evidence --vkey .chio/keys/checkpoint.vkey --kernel-key "$(cat .chio/keys/kernel.pub)" --edge-issuer .chio/keys/issuer.pub | tee verified.txt | has '^evidence package verified'
grep -q '^edges: .*each issued by a pinned --edge-issuer key' verified.txt
cp -r evidence tampered && sed '1s/hello/hellp/' evidence/receipts.ndjson > tampered/receipts.ndjson
if bin/chio evidence verify --input tampered --vkey .chio/keys/checkpoint.vkey --kernel-key "$(cat .chio/keys/kernel.pub)" 2> tampered.txt; then exit 1; fi
grep -q 'receipts.ndjson' tampered.txt
bin/chio monitor --url "http://$http" --vkey .chio/keys/checkpoint.vkey --state monitor.json | has '^monitor: OK'

bin/chio capability keygen --out agent.key > agent.pub
bin/chio capability keygen --out helper.key > helper.pub
bin/chio capability issue --issuer-key .chio/keys/issuer.key --subject "$(cat agent.pub)" \
  --grant 'hello-a2a-srv/*:invoke,delegate' --ttl 1h --max-invocations 100 --id cap-agent > agent.tok
bin/chio capability issue --issuer-key agent.key --subject "$(cat helper.pub)" \
  --grant hello-a2a-srv/hello_task --max-invocations 10 --delegate-from @agent.tok --output header > helper.tok
bin/chio capability inspect @helper.tok | tee inspect.txt | has '^ok   token narrows its parent cap-agent$'
grep -q '^principal p:[0-9a-f]\{64\} (tenant p:[0-9a-f]\{64\})$' inspect.txt
bin/chio capability keygen --out auditor.key > auditor.pub
bin/chio capability issue --issuer-key .chio/keys/issuer.key --subject "$(cat auditor.pub)" --read receipts --ttl 24h --output header > auditor.tok
curl -sf -H "Authorization: Bearer $(cat auditor.tok)" "http://$http/v1/receipts/$ID/tlog-proof" | cmp - receipt.tlog-proof
MSG='{"jsonrpc":"2.0","id":5,"method":"message/send","params":{"message":{"role":"user","messageId":"m5","parts":[{"kind":"text","text":"world"}]}}}'
bin/chio capability proof --key agent.key --token @agent.tok --method POST --url "http://$http/a2a" --headers > proof.hdr
curl -s "http://$http/a2a" -H 'Content-Type: application/json' -H @proof.hdr -d "$MSG" | tee proven.json
grep -q '"state":"completed"' proven.json
[ "$(curl -s -o replayed.json -w '%{http_code}' "http://$http/a2a" -H 'Content-Type: application/json' -H @proof.hdr -d "${MSG/m5/m6}")" = 401 ]
grep -q -- '-31401' replayed.json && grep -q 'replayed' replayed.json
curl -s "http://$http/a2a" -H 'Content-Type: application/json' -H "Authorization: Bearer $(cat helper.tok)" -d "${MSG/m5/m7}" | has '"state":"completed"'
bin/chio capability ancestor @helper.tok > rebuilt.tok
sed -n 2p agent.tok | cmp - rebuilt.tok
[ "$(curl -s -D rebuilt.hdr -o rebuilt.json -w '%{http_code}' "http://$http/a2a" -H 'Content-Type: application/json' -H "Authorization: Bearer $(cat rebuilt.tok)" -d "${MSG/m5/m8}")" = 401 ]
grep -q 'missing_proof' rebuilt.json && grep -qi '^www-authenticate: DPoP' rebuilt.hdr
bin/chio capability revoke cap-agent --nats "nats://$natsaddr" --nats-nkey .chio/nats-creds/operator.nk --reason "key rotated" | has '^revoked cap-agent$'
curl -sf "http://$http/.well-known/agent-card.json" > card.json
grep -q '"hello_task"' card.json
curl -sf "http://$http/.well-known/jwks.json" > jwks.json
bin/chio verify --agent-card card.json --jwks jwks.json | has '^verify: OK agent card'
bin/chio verify --agent-card "http://$http" | has '^verify: OK agent card'
sed 's/"streaming":true/"streaming":false/' card.json > tampered.json
if bin/chio verify --agent-card tampered.json --jwks jwks.json 2>/dev/null; then echo "tour: a tampered card verified" >&2; exit 1; fi
curl -s "http://$http/a2a" -H 'Content-Type: application/json' -H "Authorization: Bearer $(cat .chio/dev-capability.token)" \
  -d '{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"role":"user","messageId":"m1","parts":[{"kind":"text","text":"world"}]}}}' \
  | tee send.json
RID=$(sed -n 's/.*"receiptId":"\([^"]*\)".*/\1/p' send.json)
[ -n "$RID" ]
DEV="Authorization: Bearer $(cat .chio/dev-capability.token)"
for _ in $(seq 100); do [ "$(curl -s -o /dev/null -w '%{http_code}' -H "$DEV" "http://$http/v1/receipts/$RID")" = 200 ] && break; sleep 0.1; done
curl -sf -H "$DEV" "http://$http/v1/receipts/$RID" | has '"tool_name":"hello_task"'
echo '{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"role":"user","parts":[{"type":"text","text":"world"}]}}}' \
  | bin/chio edge a2a --stdio --data-dir "$work/stdio" | has '"status":"completed"'
curl -sN "http://$http/a2a" -H 'Content-Type: application/json' -H 'A2A-Version: 1.0' \
  -d '{"jsonrpc":"2.0","id":2,"method":"SendStreamingMessage","params":{"message":{"role":"ROLE_USER","messageId":"m2","parts":[{"text":"world"}]}}}' \
  | tee stream.txt
grep -q '"artifactUpdate"' stream.txt
grep '"statusUpdate"' stream.txt | has 'TASK_STATE_COMPLETED'
curl -s "http://$http/a2a/rest/message:send" -H 'Content-Type: application/json' -H 'A2A-Version: 1.0' \
  -d '{"message":{"role":"ROLE_USER","messageId":"m3","parts":[{"text":"world"}]}}' | tee rest-send.json
TID=$(sed -n 's/^{"task":{"id":"\([^"]*\)".*/\1/p' rest-send.json)
[ -n "$TID" ]
curl -s "http://$http/a2a/rest/tasks/$TID" -H 'A2A-Version: 1.0' | has 'TASK_STATE_COMPLETED'
curl -sN "http://$http/a2a/rest/tasks/$TID:subscribe" -H 'A2A-Version: 1.0' -H 'Last-Event-ID: 2' | tee resume.txt
[ "$(grep -c '^id: ' resume.txt)" = 2 ] && grep -q '^id: 3$' resume.txt && grep -q 'TASK_STATE_COMPLETED' resume.txt
grep -o '"url":"[^"]*","protocolBinding":"GRPC"' card.json | has "${http%:*}:"
for _ in $(seq 100); do curl -sf -H "$OP" "http://$http/v1/tasks/$TID" | has 'TASK_STATE_COMPLETED' && break; sleep 0.1; done
curl -sf -H "$OP" "http://$http/v1/tasks/$TID" | has '"receiptIds"'
curl -s "http://$http/a2a" -H 'Content-Type: application/json' -H "Authorization: Bearer $(cat .chio/dev-capability.token)" \
  -d '{"jsonrpc":"2.0","id":4,"method":"message/send","params":{"message":{"role":"user","messageId":"m4","parts":[{"kind":"text","text":"world"}]},"metadata":{"chio":{"governedIntent":{"id":"intent-1","server_id":"hello-a2a-srv","tool_name":"hello_task","purpose":"greet the world","max_amount":{"units":100,"currency":"EUR"}}}}}}' \
  | tee governed.json
CAP=$(sed -n 's/.*"capabilityId":"\([^"]*\)".*/\1/p' governed.json)
[ -n "$CAP" ]
for _ in $(seq 100); do curl -sf -H "$OP" "http://$http/v1/reports/authorization-context?capabilityId=$CAP&authorizationLimit=20" | has '"matchingReceipts":1' && break; sleep 0.1; done
curl -sf -H "$OP" "http://$http/v1/reports/authorization-context?capabilityId=$CAP&authorizationLimit=20" | has '"purpose":"greet the world"'
bin/chio trust authorization-context list --url "http://$http" --capability "$CAP" --limit 20 --token @.chio/operator.token | has '"intentId": "intent-1"'
curl -sf -H "$OP" "http://$http/v1/lineage/$CAP/chain" | has "\"capability_id\":\"$CAP\""
curl -sf "http://$http/openai/v1/tools?format=chat" | has '"name":"hello_task"'
curl -sf "http://$http/openai/v1/tool-calls" -H 'Content-Type: application/json' \
  -d '{"role":"assistant","tool_calls":[{"id":"call_1","type":"function","function":{"name":"hello_task","arguments":"{\"text\":\"world\"}"}}]}' \
  | tee openai.json
grep -q '"tool_call_id":"call_1"' openai.json && grep -q '"denied":false' openai.json && grep -q '"receipt_ref":"' openai.json
bin/chio keygen --out .chio/keys --keep --edge tour | has '^edge tour: key'
bin/chio openapi manifest --spec examples/openapi/chio-log-api.yaml --server-id chio-log-api | has '"name": "getCheckpoint"'
bin/chio capability issue --issuer-key .chio/keys/issuer.key --subject "$(cat agent.pub)" --grant 'chio-log-api/*' --output header > api.tok
bridgeaddr=${TOUR_BRIDGE:-127.0.0.1:18084}
protectaddr=${TOUR_PROTECT:-127.0.0.1:19090}
bin/chio bridge openapi --spec examples/openapi/chio-log-api.yaml --server-id chio-log-api --upstream "http://$http" \
  --listen "$bridgeaddr" --nats "nats://$natsaddr" --nats-nkey .chio/nats-creds/edge.nk --edge-key .chio/keys/edges/tour.key --edge-credential .chio/keys/edges/tour.cred --issuer-pub .chio/keys/issuer.pub > bridge.log 2>&1 &
bridge_pid=$!
bin/chio api protect --spec examples/openapi/chio-log-api.yaml --server-id chio-log-api --upstream "http://$http" \
  --listen "$protectaddr" --nats "nats://$natsaddr" --nats-nkey .chio/nats-creds/edge.nk --edge-key .chio/keys/edges/tour.key --edge-credential .chio/keys/edges/tour.cred --issuer-pub .chio/keys/issuer.pub > protect.log 2>&1 &
protect_pid=$!
for _ in $(seq 100); do grep -q 'MCP http' bridge.log && grep -q 'api protect: http' protect.log && break; sleep 0.1; done
curl -s "http://$bridgeaddr/mcp" -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
  -H "Authorization: Bearer $(cat api.tok)" -d '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"getCheckpoint","arguments":{}}}' \
  | tee mcp.json
grep -q '"httpStatus":200' mcp.json && grep -q '"receipt_ref":"' mcp.json
# the certified bridge's receipt reaches the log and names its edge
bridge_receipt=$(sed -n 's/.*"receipt_ref":"\([^"]*\)".*/\1/p' mcp.json | head -1)
for _ in $(seq 100); do [ "$(curl -s -o /dev/null -w '%{http_code}' -H "$OP" "http://$http/v1/receipts/$bridge_receipt")" = 200 ] && break; sleep 0.1; done
curl -sf -H "$OP" "http://$http/v1/receipts/$bridge_receipt" | has '"edge":{"credential_id":"edge.tour.'
curl -si "http://$protectaddr/log/checkpoint" -H "X-Chio-Capability: $(cat api.tok)" | tee protected.txt
grep -q '^HTTP/1.1 200' protected.txt && grep -qi '^X-Chio-Receipt: ' protected.txt
curl -s "http://$protectaddr/openai/v1/tool-calls" -H "X-Chio-Capability: $(cat api.tok)" -H 'Content-Type: application/json' -d '{}' \
  | tee denied.json
grep -q '"error":"chio_access_denied"' denied.json && grep -q 'denied by default' denied.json
echo '{"jsonrpc":"2.0","id":1,"method":"tool/invoke","params":{"capabilityId":"hello_task","arguments":{"text":"world"}}}' \
  | bin/chio edge acp --stdio --nats "nats://$natsaddr" --nats-nkey .chio/nats-creds/edge.nk --edge-key .chio/keys/edges/tour.key --edge-credential .chio/keys/edges/tour.cred --issuer-pub .chio/keys/issuer.pub --token @.chio/dev-capability.token \
  | has '"receiptId":"'
go -C "$repo" build -o "$work/bin/acp-editor" ./examples/acp/editor && go -C "$repo" build -o "$work/bin/acp-agent" ./examples/acp/agent
bin/chio capability issue --issuer-key .chio/keys/issuer.key --subject "$(cat agent.pub)" \
  --grant 'acp/*' --grant acp/fs/write_text_file --ttl 1h --output header > editor.tok
mkdir -p project && echo alpha > project/a.txt
bin/acp-editor --root project --script "read $PWD/project/a.txt;write $PWD/project/b.txt hello;run rm -rf project;read $HOME/.ssh/id_rsa" -- \
  bin/chio edge acp --proxy --nats "nats://$natsaddr" --nats-nkey .chio/nats-creds/edge.nk --edge-key .chio/keys/edges/tour.key --edge-credential .chio/keys/edges/tour.cred --issuer-pub .chio/keys/issuer.pub --token @editor.tok -- bin/acp-agent \
  | tee acp-session.txt
grep -q '^read: ok "alpha' acp-session.txt && grep -q '^write: ok .* receipt=' acp-session.txt
grep -q '^run: error .*-32002.*denied by default' acp-session.txt && grep -q '^read: error .*PathGuard' acp-session.txt
[ "$(cat project/b.txt)" = hello ] && [ -f project/a.txt ]
bin/chio a2a discover "http://$http" --partner self --require-skill hello_task | tee discover.json
grep -q "\"a2a:$http\"" discover.json
bin/chio capability issue --issuer-key .chio/keys/issuer.key --subject "$(cat agent.pub)" --grant "a2a:$http/*" --output header > partner.tok
adapteraddr=${TOUR_ADAPTER:-127.0.0.1:18085}
bin/chio a2a serve --target "http://$http" --partner self --listen "$adapteraddr" \
  --nats "nats://$natsaddr" --nats-nkey .chio/nats-creds/edge.nk --edge-key .chio/keys/edges/tour.key --edge-credential .chio/keys/edges/tour.cred --issuer-pub .chio/keys/issuer.pub > adapter.log 2>&1 &
adapter_pid=$!
for _ in $(seq 100); do grep -q 'MCP http' adapter.log && break; sleep 0.1; done
bin/chio tools list --url "http://$adapteraddr" --token @partner.tok | tee tools.txt
grep -q "a2a:$http/hello_task" tools.txt
curl -s "http://$adapteraddr/mcp" -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
  -H "Authorization: Bearer $(cat partner.tok)" -d '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"hello_task","arguments":{"message":"world"}}}' \
  | tee adapter.json
grep -q '"decision":"allow"' adapter.json && grep -q 'hello from a2a' adapter.json
edgeaddr=${TOUR_EDGE:-127.0.0.1:18082}
bin/chio edge a2a --nats "nats://$natsaddr" --nats-nkey .chio/nats-creds/edge.nk --edge-key .chio/keys/edges/tour.key --edge-credential .chio/keys/edges/tour.cred --listen "$edgeaddr" --issuer-pub .chio/keys/issuer.pub --demo conformance > edge.log 2>&1 &
edge_pid=$!
for _ in $(seq 100); do curl -sf "http://$edgeaddr/.well-known/agent-card.json" >/dev/null && break; sleep 0.1; done
curl -sf "http://$edgeaddr/.well-known/agent-card.json" | has '"hello_task"'
curl -sf "http://$edgeaddr/.well-known/agent-card.json" | has '"id":"conformance"'
# a separate replica refuses tokenless callers (no dev capability outside chio up)
curl -s "http://$edgeaddr/a2a" -H 'Content-Type: application/json' \
  -d '{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"role":"user","messageId":"m1","parts":[{"kind":"text","text":"world"}]}}}' | has -- '-31401'
kill -INT "$edge_pid"; wait "$edge_pid" 2>/dev/null || true
bin/chio edge a2a agent-card | has '"bridgeFidelity"'

# An MCP server wrapped as governed tools: chio up again, with the server.
kill -INT "$up_pid"; wait "$up_pid" 2>/dev/null || true
( cd "$repo" && go build -o "$work/bin/mcp-notes" ./examples/mcp-notes )
rm -f .chio/operator.token
bin/chio up --listen "$http" --nats-listen "$natsaddr" --mcp-server 'notes=bin/mcp-notes' > up.log 2>&1 &
up_pid=$!
for _ in $(seq 600); do curl -sf "http://$http/log/checkpoint" >/dev/null && [ -f .chio/operator.token ] && break; sleep 0.1; done
OP="Authorization: Bearer $(cat .chio/operator.token)"
curl -s "http://$http/openai/v1/tool-calls" -H 'Content-Type: application/json' \
  -d '{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"count_words","arguments":"{\"text\":\"tools from anywhere\"}"}}]}' | tee notes-openai.json
grep -q 'words.*3' notes-openai.json
bin/chio a2a send "http://$http" --skill count_words --data '{"text":"one two three"}' | tee notes-a2a.json
grep -q '"words":3' notes-a2a.json
for RID in $(sed -n 's/.*"receipt_ref":"\([^"]*\)".*/\1/p' notes-openai.json) $(sed -n 's/.*"receiptId":"\([^"]*\)".*/\1/p' notes-a2a.json); do
  for _ in $(seq 100); do [ "$(curl -s -o /dev/null -w '%{http_code}' -H "$OP" "http://$http/v1/receipts/$RID")" = 200 ] && break; sleep 0.1; done
  curl -sf -H "$OP" "http://$http/v1/receipts/$RID" > notes-receipt.json
  grep -q '"tool_server":"notes"' notes-receipt.json
  curl -sf -H "$OP" "http://$http/v1/receipts/$RID/tlog-proof" > notes-receipt.tlog-proof
  bin/chio verify --receipt notes-receipt.json --proof notes-receipt.tlog-proof --vkey .chio/keys/checkpoint.vkey --kernel-key "$(cat .chio/keys/kernel.pub)"
done

# Callers with an identity provider's access token: chio up again, trusting a development provider.
kill -INT "$up_pid"; wait "$up_pid" 2>/dev/null || true
oidcaddr=${TOUR_OIDC:-127.0.0.1:18090}
( cd "$repo" && go build -o "$work/bin/oidc-provider" ./examples/oidc-provider )
bin/oidc-provider --listen "$oidcaddr" > oidc.log 2>&1 &
oidc_pid=$!
for _ in $(seq 100); do curl -sf "http://$oidcaddr/.well-known/openid-configuration" >/dev/null && break; sleep 0.1; done
rm -f .chio/operator.token
bin/chio up --listen "$http" --nats-listen "$natsaddr" --mcp-server 'notes=bin/mcp-notes' --oidc-issuer "http://$oidcaddr" --oidc-audience agent-7 --oidc-grant 'sub=agent-7:notes/count_words' > up.log 2>&1 &
up_pid=$!
for _ in $(seq 600); do curl -sf "http://$http/log/checkpoint" >/dev/null && [ -f .chio/operator.token ] && break; sleep 0.1; done
OP="Authorization: Bearer $(cat .chio/operator.token)"
TOKEN=$(curl -sf "http://$oidcaddr/oauth/token" -d grant_type=client_credentials -d client_id=agent-7 -d client_secret=secret-7 | sed -n 's/.*"access_token":"\([^"]*\)".*/\1/p')
bin/chio a2a send "http://$http" --skill count_words --data '{"text":"who is calling"}' --token "$TOKEN" | tee jwt-a2a.json
RID=$(sed -n 's/.*"receiptId":"\([^"]*\)".*/\1/p' jwt-a2a.json)
for _ in $(seq 100); do [ "$(curl -s -o /dev/null -w '%{http_code}' -H "$OP" "http://$http/v1/receipts/$RID")" = 200 ] && break; sleep 0.1; done
curl -sf -H "$OP" "http://$http/v1/receipts/$RID" > jwt-receipt.json
curl -sf -H "$OP" "http://$http/v1/receipts/$RID/tlog-proof" > jwt-receipt.tlog-proof
bin/chio verify --receipt jwt-receipt.json --proof jwt-receipt.tlog-proof --vkey .chio/keys/checkpoint.vkey --kernel-key "$(cat .chio/keys/kernel.pub)" | tee jwt-verify.txt
grep -q '^identity: "agent-7" of "http://' jwt-verify.txt
curl -sf "http://$http/v1/token" -d grant_type=urn:ietf:params:oauth:grant-type:token-exchange -d subject_token="$TOKEN" -d subject_token_type=urn:ietf:params:oauth:token-type:access_token | tee exchanged.json
CAP=$(sed -n 's/.*"access_token":"\([^"]*\)".*/\1/p' exchanged.json)
bin/chio capability inspect "$CAP" | tee exchanged-inspect.txt
bin/chio a2a send "http://$http" --skill count_words --data '{"text":"under an exchanged capability"}' --token "$CAP" | tee exchanged-a2a.json
grep -q '"words":4' exchanged-a2a.json
echo "tour: OK"
