#!/usr/bin/env bash
# Whether this machine's Python reads torch's bytecode from a cache or compiles its sources in every process
# (issue 26: 6.7 s of builtins.compile in one `kgen eval` on the H100 box), and what a pycache prefix buys.
#   bash benchmarks/pyc_probe.sh
env | grep -E '^PYTHON' || echo "(no PYTHON* variables)"
python3 - <<'PY'
import importlib.util, os, sys, sysconfig
import torch
src = torch.__file__
pyc = importlib.util.cache_from_source(src)
print("dont_write_bytecode", sys.flags.dont_write_bytecode, "pycache_prefix", sys.pycache_prefix)
print("torch at", os.path.dirname(src), "writable", os.access(os.path.dirname(src), os.W_OK))
print("its __init__ bytecode", pyc, "exists", os.path.exists(pyc))
n = sum(1 for r, d, f in os.walk(os.path.dirname(src)) for x in f if x.endswith(".pyc"))
print(".pyc files under torch:", n)
PY
t() { local s=$(date +%s.%N); "$@" >/dev/null 2>&1; python3 -c "print(f'{$(date +%s.%N) - $s:.2f} s')"; }
echo "import torch, as is: $(t python3 -c 'import torch')  again: $(t python3 -c 'import torch')"
rm -rf /tmp/pyc-probe
echo "with a pycache prefix, writing (first): $(t env PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX=/tmp/pyc-probe python3 -c 'import torch')"
echo "with the prefix, read back: $(t env PYTHONPYCACHEPREFIX=/tmp/pyc-probe python3 -c 'import torch')  again: $(t env PYTHONPYCACHEPREFIX=/tmp/pyc-probe python3 -c 'import torch')"
echo "kgen's judge imports, as is: $(t python3 -c 'import kgen.judge.evaluate, triton')  with the prefix (writing): $(t env PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX=/tmp/pyc-probe python3 -c 'import kgen.judge.evaluate, triton')  read back: $(t env PYTHONPYCACHEPREFIX=/tmp/pyc-probe python3 -c 'import kgen.judge.evaluate, triton')"
du -sh /tmp/pyc-probe
