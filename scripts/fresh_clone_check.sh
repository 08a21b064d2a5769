#!/usr/bin/env bash
# The README's two set-up commands, verbatim, as a new user on a fresh machine runs them:
#   a new clone of the committed HEAD beside shared/ (so the README's relative mirror path resolves),
#   a new venv, no pip cache (PIP_NO_CACHE_DIR=1: a cached wheel hides build problems), an empty
#   ddibench cache and model store (XDG_CACHE_HOME points at an empty directory; DDIBENCH_CACHE and
#   DDIBENCH_MODELS unset), none of .ci/run's variables (CMAKE_ARGS, CI, ...), and only
#   DDIBENCH_MIRROR=../shared/mirror/github exported, relative, as the README suggests.
# It fails if either command fails, or if any answer of command 1 came from a cache instead of the model.
# Between the two commands, in command 1's venv and still-empty board cache, it walks the other two users:
#   the reviewer: 'ddibench board serve' until headless Chromium shows the matrix; 'board export --html'
#     (from the store serve built, and again from an empty cache);
#   the author: an outside adapter (docs/examples/trained_pairs.py as its own package, 'pip install -e'd from
#     a folder) run on the full drugbank_s2 split, packed, verified (a local adapter: verify must warn),
#     published into the clone's results/ ('git status' must show the bundle, the index and the tables), and
#     'board check' of the whole folder (its own part, 'check': half an hour on 2 cores);
#   each timed; a step that fails fails the check.
#
# Usage: scripts/fresh_clone_check.sh [--keep] [--only 1,users,check,2]  (any of them, comma-separated; all by
#        default: about 1.5 hours on 2 cores; '--only 1,users' walks the three users in about 10 minutes)
set -uo pipefail

keep=0; only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --keep) keep=1 ;;
    --only) only="$2"; shift ;;
    *) echo "usage: $0 [--keep] [--only 1,users,check,2]" >&2; exit 2 ;;
  esac
  shift
done

repo="$(cd "$(dirname "$0")/.." && pwd)"
parent="$(dirname "$repo")"
if ! [ -d "$parent/shared/mirror/github" ]; then
  echo "error: no mirror at $parent/shared/mirror/github; this check runs the README as it reads on a machine without GitHub access" >&2
  exit 2
fi
clone="$(mktemp -d "$parent/fresh-clone.XXXXXX")"  # beside shared/, as CI's clone is
scratch="$(mktemp -d /tmp/ddibench-fresh.XXXXXX)"   # the empty caches and the logs
home_cache="$scratch/cache"
mkdir -p "$home_cache"
cleanup() { if [ "$keep" = 0 ]; then rm -rf "$clone" "$scratch"; else echo "kept: $clone $scratch"; fi; }
trap cleanup EXIT

git clone -q "$repo" "$clone" || exit 2
commit="$(git -C "$clone" rev-parse --short HEAD)"
readme="$clone/README.md"
# the two commands, exactly as the README's set-up block writes them
cmd1="$(grep -A1 '^# 1\. ' "$readme" | tail -1)"
cmd2="$(grep -A1 '^# 2\. ' "$readme" | tail -1)"
[ -n "$cmd1" ] && [ -n "$cmd2" ] || { echo "error: cannot find the two set-up commands in README.md" >&2; exit 2; }

fresh_env=(env -u CMAKE_ARGS -u CI -u DDIBENCH_CACHE -u DDIBENCH_MODELS -u DDIBENCH_DOWNLOAD_BASE -u DDIBENCH_MIRROR
           -u VIRTUAL_ENV -u PIP_FIND_LINKS_EXTRA -u PYTHONPATH
           PIP_NO_CACHE_DIR=1 XDG_CACHE_HOME="$home_cache" DDIBENCH_MIRROR=../shared/mirror/github)

status=0
summary=()
run_command() {  # N DIR COMMAND
  local n="$1" dir="$2" command="$3" start end rc
  rm -rf "$dir/.venv"
  start=$(date +%s)
  (cd "$dir" && "${fresh_env[@]}" bash -c "$command") >"$scratch/command$n.log" 2>&1
  rc=$?
  end=$(date +%s)
  summary+=("command $n: exit $rc in $((end - start)) s (log: $scratch/command$n.log)")
  [ "$rc" = 0 ] || status=1
  return $rc
}

echo "fresh clone of $commit in $clone; caches empty under $home_cache"
if [ -z "$only" ] || [[ ",$only," == *,1,* ]]; then
  echo "command 1: $cmd1"
  run_command 1 "$clone" "$cmd1"
  tail -n 25 "$scratch/command1.log"
  # every answer of command 1 must come from the model: no cache hit, at least one call per item
  if calls="$(cd "$clone" && "${fresh_env[@]}" .venv/bin/python - <<'EOF'
import json, pathlib, sys
sessions = sorted(pathlib.Path("runs").rglob("sessions.jsonl"))
if len(sessions) != 1:
    sys.exit(f"expected one run under runs/, found {len(sessions)}")
run = sessions[0].parent
items = sum(1 for _ in open(run / "journal.jsonl"))
calls = hits = 0
for line in sessions[0].read_text().splitlines():
    end = json.loads(line)
    if end.get("state") == "started":
        continue
    for usage in end.get("llm_usage", {}).values():
        calls += usage.get("calls", 0)
        hits += usage.get("cache_hits", 0)
print(f"{items} items, {calls} model calls, {hits} answers from a cache")
sys.exit(0 if hits == 0 and items > 0 and calls >= items else 1)
EOF
)"; then
    summary+=("command 1 model use: $calls")
  else
    summary+=("FAIL command 1 model use: ${calls:-no run to inspect} (every answer must come from the model)")
    status=1
  fi
fi
timed() {  # LABEL COMMAND...: run in the clone with command 1's venv, record the time, fail the check on failure
  local label="$1" start rc; shift
  start=$(date +%s)
  (cd "$clone" && "${fresh_env[@]}" bash -c ". .venv/bin/activate && $*") >>"$scratch/users.log" 2>&1
  rc=$?
  summary+=("$label: exit $rc in $(( $(date +%s) - start )) s")
  [ "$rc" = 0 ] || status=1
  return $rc
}

users() {
  [ -x "$clone/.venv/bin/ddibench" ] || { summary+=("FAIL users: command 1's venv is missing (run it first)"); status=1; return; }
  : >"$scratch/users.log"
  # the reviewer: the board's first page, from a fresh clone's empty cache
  local port=8765 start served=""
  start=$(date +%s)
  (cd "$clone" && "${fresh_env[@]}" .venv/bin/ddibench board serve --port $port) >>"$scratch/users.log" 2>&1 &
  local server=$!
  while [ $(( $(date +%s) - start )) -lt 900 ] && kill -0 $server 2>/dev/null; do
    if timeout 60 chromium --headless --no-sandbox --disable-gpu --disable-background-networking \
         --virtual-time-budget=20000 --dump-dom "http://127.0.0.1:$port/" 2>/dev/null | grep -q "drugbank_s2"; then
      served=$(( $(date +%s) - start )); break
    fi
    sleep 2
  done
  kill -TERM -- $server 2>/dev/null; pkill -f "streamlit run .*--server.port $port" 2>/dev/null; wait $server 2>/dev/null
  if [ -n "$served" ]; then summary+=("board serve: the matrix in headless Chromium after $served s");
  else summary+=("FAIL board serve: no matrix in headless Chromium"); status=1; fi
  timed "board export --html (store cached by serve)" ddibench board export --html "$scratch/site"
  timed "board export --html (empty cache)" XDG_CACHE_HOME="$scratch/cache-export" ddibench board export --html "$scratch/site2"
  # the author: an outside adapter from a local folder, a full split, verify, publish, check
  local adapter="$scratch/my-adapter"
  mkdir -p "$adapter"
  cp "$clone/docs/examples/trained_pairs.py" "$adapter/my_adapter.py"
  printf '%s\n' '[project]' 'name = "my-adapter"' 'version = "0.1.0"' '[project.entry-points."ddibench.systems"]' \
    'fp-logreg = "my_adapter:FingerprintLogReg"' '[build-system]' 'requires = ["setuptools>=61"]' \
    'build-backend = "setuptools.build_meta"' '[tool.setuptools]' 'py-modules = ["my_adapter"]' >"$adapter/pyproject.toml"
  timed "author: pip install -e of the adapter" pip install -q -e "$adapter" || return
  timed "author: run on the full drugbank_s2 split" ddibench run -s fp-logreg -t drugbank_s2 --run-dir "$scratch/author-run" || return
  timed "author: submit --compact" ddibench submit --compact "$scratch/author-run" --out "$scratch/author.tar.gz" || return
  timed "author: verify" ddibench verify "$scratch/author.tar.gz" || return
  if grep -q "public source and commit" "$scratch/users.log"; then summary+=("author: verify warned that the adapter is local");
  else summary+=("FAIL author: verify did not say the adapter is local"); status=1; fi
  timed "author: board publish of one outside bundle" ddibench board publish "$scratch/author.tar.gz"
  local changed
  changed="$(git -C "$clone" status --porcelain | tr '\n' ' ')"
  summary+=("author: git status after publish: $changed")
  for path in "results/README.md" "docs/results.md" "results/index.json" "results/drugbank_s2/"; do
    case "$changed" in *"$path"*) ;; *) summary+=("FAIL author: publish did not write $path"); status=1 ;; esac
  done
}

check() {  # 'board check' of the whole folder, the author's bundle included when 'users' ran before it
  [ -x "$clone/.venv/bin/ddibench" ] || { summary+=("FAIL check: command 1's venv is missing (run it first)"); status=1; return; }
  timed "board check (the whole folder recomputed, as CI)" ddibench board check
}

if [ -z "$only" ] || [[ ",$only," == *,users,* ]]; then
  echo "the three users (log: $scratch/users.log)"
  users
fi
if [ -z "$only" ] || [[ ",$only," == *,check,* ]]; then
  check
fi
git -C "$clone" checkout -q -- . && git -C "$clone" clean -qfd results/  # command 2 tests the committed results
if [ -z "$only" ] || [[ ",$only," == *,2,* ]]; then
  echo "command 2: $cmd2"
  run_command 2 "$clone" "$cmd2"
  tail -n 15 "$scratch/command2.log"
  summary+=("command 2 result: $(grep -E '^=+ .*(passed|failed|error).* =+$' "$scratch/command2.log" | tail -1)")
fi

echo
echo "fresh-clone check of $commit ($(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)):"
printf '  %s\n' "${summary[@]}"
[ "$status" = 0 ] && echo "  PASS" || echo "  FAIL"
exit $status
