#!/usr/bin/env python3
"""Summarise a `perf sched record -a` trace: each CPU's idle time, and the
wake-ups by waker and wakee kind (how many landed on an idle CPU, and how
long each waited from its wake-up to running).

    perf script -i perf.data | scripts/sched-wakeups.py

Kinds: HOP (the proxy, the test binary holding it, or MySQL Router's
threads), mysqld, sysb (sysbench), idle, other. Used by
docs/benchmarks-proxy.md, "Worker processes", with TestSysbenchSpeed's
CAUSALLAB_PROXY_BENCH_HOOK recording two seconds of each target's run.
"""
import collections
import re
import sys

LINE = re.compile(r'^\s*(\S.*?)\s+(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+sched:(\w+):\s+(.*)$')
FIELD = re.compile(r'(\w+=\S+)')
HOPS = ('proxy.test', 'causallab', 'mysqlrouter')


def kind(comm):
    if comm.startswith('mysqld'):
        return 'mysqld'
    if comm.startswith('sysbench'):
        return 'sysb'
    if comm in HOPS or comm.startswith('io-'):
        return 'HOP'
    if comm.startswith('swapper'):
        return 'idle'
    return 'other'


def main():
    idle_since, pending = {}, {}
    idle_total, idle_n = collections.Counter(), collections.Counter()
    pairs, into_idle = collections.Counter(), collections.Counter()
    delay = collections.defaultdict(list)
    t0 = t1 = None

    def end_idle(cpu, t):
        idle_total[cpu] += t - idle_since.pop(cpu)
        idle_n[cpu] += 1

    for line in sys.stdin:
        m = LINE.match(line)
        if not m:
            continue
        comm, pid, cpu, t, ev, rest = m.group(1), int(m.group(2)), int(m.group(3)), float(m.group(4)), m.group(5), m.group(6)
        t0 = t if t0 is None else t0
        t1 = t
        # Some kernels leave the switch out of idle out of the trace: any
        # event a task records on an idle CPU ends its idle spell.
        if pid != 0 and cpu in idle_since and ev != 'sched_switch':
            end_idle(cpu, t)
        f = dict(kv.split('=', 1) for kv in FIELD.findall(rest))
        if ev == 'sched_switch':
            if int(f['prev_pid']) == 0 and cpu in idle_since:
                end_idle(cpu, t)
            nxt = int(f['next_pid'])
            if nxt == 0:
                idle_since[cpu] = t
            elif nxt in pending:
                tw, waker, target, was_idle = pending.pop(nxt)
                where = 'idle' if was_idle else ('same' if target == cpu else 'busy')
                delay[(waker, kind(f['next_comm']), where)].append(t - tw)
        elif ev == 'sched_waking':
            wakee, target = int(f['pid']), int(f['target_cpu'])
            was_idle = target != cpu and target in idle_since
            key = (kind(comm), kind(f['comm']))
            pending[wakee] = (t, key[0], target, was_idle)
            pairs[key] += 1
            if was_idle:
                into_idle[key] += 1
    if t0 is None:
        sys.exit('no sched events on stdin (perf script of a perf sched record?)')
    span = t1 - t0
    print(f'span {span:.3f} s')
    for c in sorted(idle_total):
        print(f'cpu{c}: idle {100 * idle_total[c] / span:.1f} % in {idle_n[c]} spells, '
              f'mean {1e6 * idle_total[c] / max(1, idle_n[c]):.0f} us')
    print('wake-ups, waker -> wakee: all, onto an idle CPU')
    for (a, b), n in pairs.most_common(8):
        print(f'  {a:>6} -> {b:<6} {n:7d} {into_idle[(a, b)]:7d}')
    print('wake-up to running, us (waker, wakee, target CPU): n, mean, p50, p90')
    for k, v in sorted(delay.items(), key=lambda kv: -len(kv[1]))[:10]:
        v.sort()
        n = len(v)
        print(f'  {k[0]:>6} {k[1]:<6} {k[2]:<4} {n:7d} {1e6 * sum(v) / n:6.1f} {1e6 * v[n // 2]:6.1f} {1e6 * v[int(n * .9)]:6.1f}')


if __name__ == '__main__':
    main()
