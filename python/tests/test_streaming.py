"""The streaming contract, spoken by mapagg.run() over in-memory pipes."""

import io
import json
import os
import subprocess
import sys
import unittest

import mapagg
from mapagg import streaming

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "..", "examples", "programs")


def run_role(role, data, mapper=None, reducer=None, combiner=None, params="{}", map_chunk=None, map_blocks=None):
    out = io.BytesIO()
    env = {"MAPAGG_ROLE": role, "MAPAGG_PARAMS": params}
    with self_exit() as code:
        mapagg.run(mapper=mapper, reducer=reducer, combiner=combiner, argv=[], stdin=io.BytesIO(data), stdout=out, environ=env, map_chunk=map_chunk, map_blocks=map_blocks)
    return code[0], out.getvalue()


class self_exit:
    """Catches run()'s sys.exit and records the status."""

    def __enter__(self):
        self.code = [None]
        return self.code

    def __exit__(self, typ, value, tb):
        if typ is SystemExit:
            self.code[0] = value.code
            return True
        return False


def words(line):
    for w in line.split():
        yield w, 1


def total(key, values):
    return sum(values)


class EscapeTest(unittest.TestCase):
    def test_round_trip(self):
        for s in ["", "plain", "a\tb", "line\nbreak", "cr\r", "back\\slash", "\\t literal", "\\"]:
            e = mapagg.escape(s)
            self.assertNotIn("\t", e)
            self.assertNotIn("\n", e)
            self.assertEqual(mapagg.unescape(e), s)

    def test_unknown_escape_kept(self):
        self.assertEqual(mapagg.unescape("C:\\path\\x"), "C:\\path\\x")


class RolesTest(unittest.TestCase):
    def test_map_combines_in_memory(self):
        code, out = run_role("map", b"a b a\nb a\n", mapper=words, combiner=total, reducer=total)
        self.assertEqual(code, 0)
        self.assertEqual(sorted(out.decode().splitlines()), ["a\t3", "b\t2"])

    def test_map_in_small_blocks_compacts_and_writes_out(self):
        # Blocks of 16 bytes (lines cut across reads, a last line without its newline) and a
        # combine bound of 8 values: both the per-line mapper and map_chunk give the exact count.
        import collections

        saved = streaming._BLOCK_BYTES, streaming._COMBINE_ITEMS, streaming._BATCH

        def restore():
            streaming._BLOCK_BYTES, streaming._COMBINE_ITEMS, streaming._BATCH = saved

        self.addCleanup(restore)
        streaming._BLOCK_BYTES, streaming._COMBINE_ITEMS, streaming._BATCH = 16, 8, 5
        lines = [" ".join(f"w{(i * 7 + j) % 13}" for j in range(i % 5)) for i in range(200)]
        data = ("\n".join(lines) + "\nlast w1").encode()
        want = collections.Counter(data.decode().split())

        def chunk(text):
            self.assertTrue(text.endswith("\n") or text.endswith("last w1"), text)
            return collections.Counter(text.split())

        def blocks(texts):
            c = collections.Counter()
            for text in texts:
                c.update(text.split())
            return c

        def blocks_lazily(texts):  # a generator of pairs: held values are counted as they come
            for text in texts:
                for w in text.split():
                    yield w, 1

        for kw in ({"mapper": words}, {"map_chunk": chunk}, {"map_blocks": blocks}, {"map_blocks": blocks_lazily}):
            code, out = run_role("map", data, combiner=total, reducer=total, **kw)
            self.assertEqual(code, 0)
            got = collections.Counter()
            for line in out.decode().splitlines():
                k, v = line.split("\t")
                got[k] += int(v)
            self.assertEqual(got, want, kw)
            if kw.get("map_blocks") is not blocks:  # one mapping of distinct keys: nothing to combine
                self.assertGreater(len(out.decode().splitlines()), len(want), "the bound never wrote out")

    def test_map_chunk_pairs_and_none(self):
        def chunk(text):
            if "skip" in text:
                return None
            return [(w, len(w)) for w in text.split()]

        code, out = run_role("map", b"ab c\n", map_chunk=chunk, reducer=total)
        self.assertEqual((code, out.decode().splitlines()), (0, ["ab\t2", "c\t1"]))
        self.assertEqual(run_role("map", b"skip\n", map_chunk=chunk, reducer=total), (0, b""))

    def test_map_without_combiner_writes_every_pair(self):
        code, out = run_role("map", b"a b a\n", mapper=words, reducer=total)
        self.assertEqual(out.decode().splitlines(), ["a\t1", "b\t1", "a\t1"])

    def test_typed_values_and_escaped_keys(self):
        def m(line):
            yield "k\t" + line, {"n": len(line), "s": line}

        def r(key, values):
            vs = list(values)
            return {"count": len(vs), "first": vs[0]}

        code, out = run_role("map", b"x\\y\n", mapper=m, reducer=r)
        self.assertEqual(out, b'k\\tx\\\\y\t{"n":3,"s":"x\\\\\\\\y"}\n')
        code, red = run_role("reduce", out + out, mapper=m, reducer=r)
        self.assertEqual(code, 0)
        key, value = red.decode().rstrip("\n").split("\t")
        self.assertEqual(mapagg.unescape(key), "k\tx\\y")
        self.assertEqual(json.loads(mapagg.unescape(value)), {"count": 2, "first": {"n": 3, "s": "x\\y"}})

    def test_reduce_groups_sorted_keys_and_generators(self):
        def r(key, values):
            yield key + "-sum", sum(values)
            yield key + "-n", 0

        code, out = run_role("reduce", b"a\t1\na\t2\nb\t5\n", reducer=r)
        self.assertEqual(out.decode().splitlines(), ["a-sum\t3", "a-n\t0", "b-sum\t5", "b-n\t0"])

    def test_reducer_that_reads_part_of_its_values(self):
        def first(key, values):
            return next(values)

        code, out = run_role("reduce", b"a\t1\na\t2\nb\t5\nb\t6\n", reducer=first)
        self.assertEqual(out.decode().splitlines(), ["a\t1", "b\t5"])

    def test_values_from_other_languages_stay_strings(self):
        code, out = run_role("reduce", b"a\thello\na\t3\n", reducer=lambda k, vs: [type(v).__name__ for v in vs])
        self.assertEqual(out.decode(), 'a\t["str","int"]\n')

    def test_describe(self):
        code, out = run_role("describe", b"", mapper=words, reducer=total)
        self.assertEqual(code, 0)
        self.assertEqual(json.loads(out)["combine"], False)

    def test_malformed_input_fails(self):
        code, _ = run_role("reduce", b"no tab here\n", reducer=total)
        self.assertEqual(code, 1)

    def test_params(self):
        os.environ["MAPAGG_PARAMS"] = '{"column": 2}'
        try:
            self.assertEqual(mapagg.params(), {"column": 2})
        finally:
            del os.environ["MAPAGG_PARAMS"]


class ProcessTest(unittest.TestCase):
    """The examples as the worker runs them: a process per role."""

    def run_example(self, role, data, *extra_env):
        env = dict(os.environ, MAPAGG_ROLE=role, PYTHONPATH=os.path.join(HERE, ".."))
        for kv in extra_env:
            k, v = kv.split("=", 1)
            env[k] = v
        return subprocess.run([sys.executable, os.path.join(EXAMPLES, "wordcount.py")], input=data, env=env, capture_output=True)

    def test_wordcount_roles(self):
        m = self.run_example("map", b"the cat the\n")
        self.assertEqual(m.returncode, 0, m.stderr)
        self.assertEqual(sorted(m.stdout.decode().splitlines()), ["cat\t1", "the\t2"])
        r = self.run_example("reduce", b"cat\t1\nthe\t2\nthe\t5\n")
        self.assertEqual(r.stdout.decode().splitlines(), ["cat\t1", "the\t7"])

    def test_exception_names_itself_on_the_last_stderr_line(self):
        def boom(line):
            raise KeyError("missing column")

        script = "import mapagg\ndef mapper(line):\n    raise KeyError('missing column')\ndef reducer(k, v):\n    return 0\nmapagg.run()\n"
        env = dict(os.environ, MAPAGG_ROLE="map", PYTHONPATH=os.path.join(HERE, ".."))
        p = subprocess.run([sys.executable, "-c", script], input=b"x\n", env=env, capture_output=True)
        self.assertEqual(p.returncode, 1)
        last = p.stderr.decode().strip().splitlines()[-1]
        self.assertEqual(last, "mapagg: map failed: KeyError: 'missing column'")

    def test_local_run(self):
        env = dict(os.environ, PYTHONPATH=os.path.join(HERE, ".."))
        env.pop("MAPAGG_ROLE", None)
        p = subprocess.run([sys.executable, os.path.join(EXAMPLES, "wordcount.py")], input=b"b a b\n", env=env, capture_output=True)
        self.assertEqual(p.stdout.decode().splitlines(), ["a\t1", "b\t2"])



def frame_task(seq, role, data, **fields):
    """A session task as the worker sends it: its line, its input in frames, the end frame."""
    head = dict(seq=seq, role=role, **fields)
    out = b"mapagg:task " + json.dumps(head).encode() + b"\n"
    for i in range(0, len(data), 5):  # frames cut anywhere, even inside a line
        out += b"%d\n" % len(data[i : i + 5]) + data[i : i + 5]
    return out + b"0\n"


class SessionTest(unittest.TestCase):
    """MAPAGG_ROLE=session: one process serves a job's tasks, framed."""

    def serve(self, data, **fns):
        out = io.BytesIO()
        env = {"MAPAGG_ROLE": "session", "MAPAGG_PARAMS": "{}"}
        with self_exit() as code:
            mapagg.run(argv=[], stdin=io.BytesIO(data), stdout=out, environ=env, **fns)
        return code[0], out.getvalue(), env

    def test_tasks_in_turn(self):
        data = frame_task(1, "map", b"the cat the\ndog\n", shard=0, attempt=1)
        data += frame_task(2, "map", b"", shard=1, attempt=2)
        data += frame_task(3, "reduce", b"cat\t1\nthe\t2\nthe\t5\n", partition=0)
        code, out, env = self.serve(data, mapper=words, reducer=total, combiner=total)
        self.assertEqual(code, 0)
        tasks = out.decode().split("mapagg:end ")
        self.assertEqual(sorted(tasks[0].splitlines()), ["cat\t1", "dog\t1", "the\t2"])
        self.assertEqual(tasks[1], "1\n")
        self.assertEqual(tasks[2].splitlines(), ["2", "cat\t1", "the\t7"])
        self.assertEqual(tasks[3], "3\n")
        self.assertEqual(env["MAPAGG_ROLE"], "reduce")
        self.assertEqual(env["MAPAGG_PARTITION"], "0")
        self.assertNotIn("MAPAGG_SHARD", env)

    def test_reducer_that_stops_early_reads_its_input_all_the_same(self):
        def first(key, values):
            return next(values)

        data = frame_task(1, "reduce", b"a\t1\na\t2\nb\t3\n", partition=0) + frame_task(2, "reduce", b"c\t4\n", partition=1)
        code, out, _ = self.serve(data, reducer=first, mapper=words)
        self.assertEqual(code, 0)
        self.assertEqual(out.decode(), "a\t1\nb\t3\nmapagg:end 1\nc\t4\nmapagg:end 2\n")

    def test_map_blocks_in_a_session(self):
        from collections import Counter

        def map_blocks(blocks):
            c = Counter()
            for text in blocks:
                c.update(text.split())
            return c

        data = frame_task(1, "map", b"a b\nb c\n", shard=0) + frame_task(2, "map", b"z\n", shard=1)
        code, out, _ = self.serve(data, map_blocks=map_blocks, reducer=total, combiner=total)
        self.assertEqual(code, 0)
        self.assertEqual(out.decode(), "a\t1\nb\t2\nc\t1\nmapagg:end 1\nz\t1\nmapagg:end 2\n")

    def test_bad_framing_fails(self):
        for data in (b"not a task line\n", b'mapagg:task {"seq":1,"role":"map"}\nxyz\n', b'mapagg:task {"seq":1,"role":"map"}\n10\nab'):
            code, _, _ = self.serve(data, mapper=words, reducer=total)
            self.assertEqual(code, 1, data)

    def test_raise_names_the_task_role(self):
        script = "import mapagg\ndef mapper(line):\n    raise KeyError('missing column')\ndef reducer(k, v):\n    return 0\nmapagg.run()\n"
        env = dict(os.environ, MAPAGG_ROLE="session", PYTHONPATH=os.path.join(HERE, ".."))
        p = subprocess.run([sys.executable, "-c", script], input=frame_task(1, "map", b"x\n", shard=0), env=env, capture_output=True)
        self.assertEqual(p.returncode, 1)
        self.assertEqual(p.stderr.decode().strip().splitlines()[-1], "mapagg: map failed: KeyError: 'missing column'")

    def test_values_decoded_once_are_never_shared_when_mutable(self):
        def grow(key, values):
            out = []
            for v in values:
                if isinstance(v, list):
                    v.append(len(out))  # a reducer may change what it gets
                out.append(v)
            return out

        data = frame_task(1, "reduce", b"a\t[0]\na\t[0]\na\t7\na\t7\nb\t[0]\n", partition=0)
        code, out, _ = self.serve(data, reducer=grow, mapper=words)
        self.assertEqual(code, 0)
        self.assertEqual(out.decode(), "a\t[[0,0],[0,1],7,7]\nb\t[[0,0]]\nmapagg:end 1\n")

    def test_describe_declares_sessions(self):
        code, out = run_role("describe", b"", mapper=words, reducer=total)
        self.assertEqual(json.loads(out)["session"], True)


class InstallTest(unittest.TestCase):
    """pip install ./python works offline: the build backend is in the tree."""

    def test_pip_install(self):
        import tempfile

        if subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode != 0:
            self.skipTest("pip is not installed")
        with tempfile.TemporaryDirectory() as target:
            p = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--target", target, os.path.join(HERE, "..")],
                               capture_output=True, env=dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1"))
            self.assertEqual(p.returncode, 0, p.stderr.decode())
            env = dict(os.environ, PYTHONPATH=target)
            q = subprocess.run([sys.executable, "-c", "import mapagg; print(mapagg.__version__)"], capture_output=True, env=env, cwd=target)
            self.assertEqual(q.stdout.decode().strip(), "0.1.0", q.stderr.decode())


if __name__ == "__main__":
    unittest.main()
