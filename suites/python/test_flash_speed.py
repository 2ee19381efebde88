"""reports/flash_speed.py: the flash attention's speed against the default attention's, from the
results two gpu-check steps write (kernel-rate and bench-train JSON)."""
import json

from reports import flash_speed


def write(path, value):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value))


def base(out):
    return ["--base-kernels", str(out / "kernels" / "kernels.json"), "--base-bench", str(out / "bench-train" / "bench.json")]


def kernels(fwd, bwd):
    return {"results": [{"name": "copy", "median_seconds": 1.0},
                        {"name": "attention fwd bf16", "median_seconds": fwd},
                        {"name": "attention bwd bf16", "median_seconds": bwd}]}


def test_ratios_are_the_default_time_over_the_flash_time(tmp_path):
    out = tmp_path / "out"
    write(out / "kernels" / "kernels.json", kernels(0.5e-3, 0.8e-3))
    write(out / "bench-train" / "bench.json", {"median_step_seconds": 0.046})
    write(out / "flash" / "kernels.json", kernels(0.25e-3, 0.2e-3))
    write(out / "flash" / "bench.json", {"median_step_seconds": 0.040, "mfu": 0.2, "tokens_per_second": 2e5})
    figures = flash_speed.compare(out / "flash", out / "kernels" / "kernels.json", out / "bench-train" / "bench.json")
    assert abs(figures["rows"]["attention fwd bf16"]["speedup"] - 2.0) < 1e-12
    assert abs(figures["rows"]["attention bwd bf16"]["speedup"] - 4.0) < 1e-12
    assert abs(figures["step"]["speedup"] - 1.15) < 1e-12
    line = flash_speed.text(figures)
    assert "attention bwd bf16 0.200 ms vs 0.800 ms (4.00x)" in line
    assert "GPT-2 step 40.000 ms vs 46.000 ms (1.15x), MFU 20.0%" in line
    assert "B32" not in line and "large_step" not in figures  # no large-batch run: nothing said
    # the padded large-batch step, where the flash step ran it, against bench-train's
    write(out / "flash" / "bench-large.json", {"batch": 32, "median_step_seconds": 0.120, "mfu": 0.3})
    write(out / "bench-train" / "bench-large.json", {"batch": 32, "median_step_seconds": 0.180})
    figures = flash_speed.compare(out / "flash", out / "kernels" / "kernels.json", out / "bench-train" / "bench.json")
    assert abs(figures["large_step"]["speedup"] - 1.5) < 1e-12
    assert flash_speed.text(figures).endswith("; B32 padded 120.000 ms vs 180.000 ms (1.50x), MFU 30.0%")


def test_a_missing_side_is_reported_missing_and_no_flash_result_fails(tmp_path, capsys):
    out = tmp_path / "out"
    write(out / "flash" / "kernels.json", kernels(0.25e-3, 0.2e-3))
    figures = flash_speed.compare(out / "flash", out / "kernels" / "kernels.json", out / "bench-train" / "bench.json")
    assert figures["rows"]["attention fwd bf16"]["speedup"] is None
    assert "0.250 ms vs missing" in flash_speed.text(figures)
    assert flash_speed.main([str(out / "flash"), *base(out)]) == 0
    assert flash_speed.main([str(tmp_path / "nothing"), *base(out)]) == 1
    assert "GPT-2 step missing vs missing" in capsys.readouterr().out


def test_the_profiled_attention_is_the_fastest_flash_step_that_passed_and_beat_the_default(tmp_path, capsys):
    out = tmp_path / "out"

    def run(steps, speedups):
        (out / "steps.tsv").write_text("".join(f"{name}\t{status}\t60.0\t\t\n" for name, status in steps))
        for name, speedup in speedups.items():
            write(out / name / "speed.json", {"step": {"speedup": speedup}})
        assert flash_speed.main(["--fastest", str(out)]) == 0
        return capsys.readouterr().out.strip()

    out.mkdir()
    # both passed: the faster; one failed: the other, however fast the failed one was
    assert run([("flash", "pass"), ("flash-mma", "pass")], {"flash": 1.2, "flash-mma": 1.6}) == "flash-mma"
    assert run([("flash", "pass"), ("flash-mma", "fail")], {"flash": 1.2, "flash-mma": 1.6}) == "flash"
    # slower than the default, unrun, or no step figure: the default attention (nothing printed)
    assert run([("flash", "pass"), ("flash-mma", "pass")], {"flash": 0.8, "flash-mma": 0.9}) == ""
    assert run([("flash", "unrun"), ("flash-mma", "unrun")], {"flash": 1.2, "flash-mma": 1.6}) == ""
    write(out / "flash-mma" / "speed.json", {"step": {"speedup": None}})
    assert run([("flash-mma", "pass")], {}) == ""
    assert flash_speed.main(["--fastest", str(tmp_path / "no run")]) == 0
    assert capsys.readouterr().out.strip() == ""
