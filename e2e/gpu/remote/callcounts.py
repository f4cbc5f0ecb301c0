"""Which forwarded calls a program made: the difference of two scrapes of
gpumux-remoted's /metrics (run.sh corpus with CORPUS_CALLS=1).

Usage: python3 callcounts.py scrape URL FILE   # save gpumux_remote_calls_total
       python3 callcounts.py diff BEFORE AFTER [N]

diff prints the N (default 15) calls made most often between the scrapes,
with whether the caller waits for each (sync) and the server's time for
them: the waiting calls are the round trips a remote step pays for.
"""
import re
import sys
import urllib.request

CALLS_DEF = __file__.rsplit("/", 4)[0] + "/remote/proto/calls.def"
LINE = re.compile(r'^gpumux_remote_(calls_total|call_duration_seconds_sum)\{([^}]*)\} (\S+)$')


def scrape(url, path):
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    with open(path, "w") as f:
        f.write(text)


def load(path):
    calls, secs = {}, {}
    for line in open(path):
        m = LINE.match(line.strip())
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
        target = calls if m.group(1) == "calls_total" else secs
        target[labels["call"]] = target.get(labels["call"], 0) + float(m.group(3))
    return calls, secs


def flags():
    out = {}
    for line in open(CALLS_DEF):
        f = line.split()
        if len(f) >= 3 and f[0].isdigit():
            out[f[1]] = "sync" if "sync" in f[2].split(",") else "async"
    return out


def diff(before, after, n=15):
    c0, s0 = load(before)
    c1, s1 = load(after)
    kind = flags()
    rows = sorted(((c1[k] - c0.get(k, 0), k) for k in c1), reverse=True)
    total = {"sync": 0, "async": 0}
    for count, name in rows:
        total[kind.get(name, "sync")] += count
    print(f"  forwarded calls: {total['sync']:.0f} waiting, {total['async']:.0f} not waiting")
    for count, name in rows[:n]:
        if count <= 0:
            break
        ms = 1000 * (s1.get(name, 0) - s0.get(name, 0))
        print(f"  {count:10.0f}  {kind.get(name, '?'):5}  {ms:10.1f} ms  {name}")


if __name__ == "__main__":
    if sys.argv[1] == "scrape":
        scrape(sys.argv[2], sys.argv[3])
    else:
        diff(sys.argv[2], sys.argv[3], *(int(a) for a in sys.argv[4:5]))
