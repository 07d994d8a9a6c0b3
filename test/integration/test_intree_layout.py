"""server/mpm/bucketed carries what httpd's build expects of an MPM directory,
and its object list for httpd's build (config3.m4) names the same sources
as the apxs build's MPM_SOURCES (Makefile.am). scripts/intree-build.sh
builds it in a real httpd tree; this only keeps the two lists in step."""
import os
import re
from pathlib import Path

TOP = Path(os.environ.get("BUCKETED_TOP") or Path(__file__).resolve().parents[2])
MPM_DIR = TOP / "server/mpm/bucketed"


def makefile_variables(text):
    """NAME = value assignments of a Makefile, continuation lines joined."""
    text = text.replace("\\\n", " ")
    return {m.group(1): m.group(2).strip()
            for m in re.finditer(r"^([A-Za-z_][A-Za-z0-9_]*)\s*=(.*)$", text, re.M)}


def expand(value, variables):
    return re.sub(r"\$\((\w+)\)",
                  lambda m: expand(variables.get(m.group(1), ""), variables), value)


def test_config3_objects_match_makefile_am_sources():
    variables = makefile_variables((TOP / "Makefile.am").read_text())
    sources = expand(variables["MPM_SOURCES"], variables).split()
    assert all(s.startswith("server/mpm/bucketed/") for s in sources), sources
    apxs = sorted(Path(s).stem for s in sources)

    config3 = (MPM_DIR / "config3.m4").read_text().replace("\\\n", " ")
    match = re.search(r'^bucketed_objects="([^"]*)"', config3, re.M)
    assert match, "config3.m4 has no bucketed_objects list"
    objects = match.group(1).split()
    assert all(o.endswith(".lo") for o in objects), objects
    intree = sorted(o[:-len(".lo")] for o in objects)

    assert intree == apxs, ("config3.m4 and Makefile.am's MPM_SOURCES differ: only in "
                            "config3.m4 %s, only in Makefile.am %s"
                            % (sorted(set(intree) - set(apxs)), sorted(set(apxs) - set(intree))))
    for stem in intree:
        assert (MPM_DIR / (stem + ".c")).is_file(), stem + ".c is listed but missing"


def test_httpd_build_files():
    # config.m4 would sort before server/mpm/config.m4 and break configure.
    assert not (MPM_DIR / "config.m4").exists()
    assert "APACHE_MPM_SUPPORTED(bucketed, yes, no)" in (MPM_DIR / "config1.m4").read_text()
    assert "APACHE_MPM_MODULE(bucketed, $enable_mpm_bucketed," in (MPM_DIR / "config3.m4").read_text()
    assert (MPM_DIR / "Makefile.in").read_text() == "include $(top_srcdir)/build/special.mk\n"
    assert (MPM_DIR / "mpm_default.h").is_file()
