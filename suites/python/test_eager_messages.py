"""ci/lint/eager_messages.py: no check() in the sources computes its message parts eagerly (the
crash of the first GPU run of the bf16-operand GEMMs: `check(..., c_in->describe(), ...)` with
c_in null), and the lint tells such a call from the ones it must let pass."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINT = ROOT / "ci" / "lint" / "eager_messages.py"


def lint(*paths):
    return subprocess.run([sys.executable, str(LINT), *map(str, paths)], capture_output=True, text=True, timeout=120)


def test_the_sources_have_no_eager_check_message():
    result = lint()
    assert result.returncode == 0, result.stdout + result.stderr


def test_computing_parts_are_found_and_named(tmp_path):
    src = tmp_path / "ops.cpp"
    src.write_text(
        "void f(const Tensor* c_in, bool in_place, const Tensor& t, const Path& dir) {\n"
        "  check(c_in == nullptr || in_place, \"C input \",\n"
        "        c_in->describe(), \" is not C\");\n"          # line 2: pointer
        "  check(t.numel() > 0, \"empty \", t.describe());\n"  # line 4: string per call
        "  check(ok(), \"in \", dir.string(), \": \", shape_str(t.shape()));\n"  # line 5
        "  check(p != nullptr, \"value \", *p);\n"           # line 6: unary *
        "}\n")
    result = lint(src)
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert [line.split(":")[1] for line in lines] == ["2", "4", "5", "6"], result.stdout
    assert "pointer dereference (->)" in lines[0] and "c_in->describe()" in lines[0]
    assert "describe()" in lines[1] and "path.string()" in lines[2] and "(*)" in lines[3]
    assert "4 check() call(s)" in result.stderr


def test_lazy_and_cheap_checks_pass(tmp_path):
    src = tmp_path / "ok.cpp"
    src.write_text(
        "void g(const Tensor& t, int n, const char* op) {\n"
        "  TRIPOD_CHECK(t.defined(), op, \": \", t.describe());\n"     # lazy: allowed
        "  check(n > 0, op, \": n = \", n, \" (a->b, describe(), *p)\");\n"  # only in a literal
        "  check(n * 2 < 9, \"rows \", n * 2, \" of \", sizeof(int));\n"    # multiplication
        "  group_->check(ncclSomething(), name_ + \": x\");\n"           # a member check
        "  opt->check(CLI::ExistingFile);\n"                              # CLI11's
        "  // check(x, y->describe());\n"                                 # a comment
        "  /* check(x, *y); */\n"
        "}\n")
    result = lint(src)
    assert result.returncode == 0, result.stdout
