. benchmarks/device_call.sh >/dev/null 2>&1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | tail -1); echo "NCU=$NCU"; $NCU --version | tail -1
$NCU --query-metrics --chip gh100 2>&1 | grep -E "stalled|warps_active|local_|spill" > $OUT/metrics.txt; wc -l $OUT/metrics.txt
python3 benchmarks/probe_ncu.py $OUT 2>&1 | tail -40
