"""Notebooks: the program the checker sees, locations back in cells, and fixes put back byte for byte."""

from __future__ import annotations

import json
import re

import libcst as cst
import pytest
from hypothesis import given
from hypothesis import strategies as st

from amp_lint.files.sources import SourceError
from amp_lint.files.notebook import Notebook


def code(source, outputs=(), execution_count=None):
    return {
        "cell_type": "code",
        "execution_count": execution_count,
        "metadata": {},
        "outputs": list(outputs),
        "source": source,
    }


def markdown(source):
    return {"cell_type": "markdown", "metadata": {}, "source": source}


def nbformat_text(cells, **dump_options):
    """The JSON as Jupyter writes it (nbformat: indent 1, sorted keys, UTF-8, final newline)."""
    document = {
        "cells": cells,
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    options = {"indent": 1, "sort_keys": True, "ensure_ascii": False, **dump_options}
    return json.dumps(document, **options) + "\n"


TRAINING = nbformat_text(
    [
        markdown(["# Training\n", "Mixed precision."]),
        code(["import torch\n", "%matplotlib inline"], execution_count=1),
        code(
            ["for x in data:\n", "    loss = model(x)\n", "    loss.backward()\n", "    opt.step()"],
            outputs=[{"name": "stdout", "output_type": "stream", "text": ["épsilon 1e-8\n"]}],
            execution_count=2,
        ),
        markdown("Done."),
        code("print('done')\n"),
    ]
)


def test_code_cells_become_one_program_with_cell_markers():
    notebook = Notebook.parse(TRAINING)
    assert notebook.source == (
        "# amp-lint: cell 2\n"
        "import torch\n"
        "pass  # amp-lint: ipython-magic 1\n"
        "# amp-lint: cell 3\n"
        "for x in data:\n"
        "    loss = model(x)\n"
        "    loss.backward()\n"
        "    opt.step()\n"
        "# amp-lint: cell 5\n"
        "print('done')\n"
    )
    cst.parse_module(notebook.source)


def test_locate_maps_program_rows_to_cells_numbered_among_all_cells():
    notebook = Notebook.parse(TRAINING)
    assert notebook.locate(2, 1) == (2, 1, 1)
    assert notebook.locate(7, 5) == (3, 3, 5)  # loss.backward()
    assert notebook.locate(10, 1) == (5, 1, 1)


def test_unchanged_program_round_trips_to_the_exact_text():
    notebook = Notebook.parse(TRAINING)
    assert notebook.updated_json(notebook.source) == TRAINING


def test_fix_in_one_cell_rewrites_only_that_cell_and_keeps_outputs_and_metadata():
    notebook = Notebook.parse(TRAINING)
    fixed = notebook.updated_json(notebook.source.replace("loss.backward()", "scaler.scale(loss).backward()"))
    document = json.loads(TRAINING)
    document["cells"][2]["source"][2] = "    scaler.scale(loss).backward()\n"
    assert fixed == json.dumps(document, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def test_unchanged_cells_keep_every_byte_of_unusual_formatting():
    # Not as Jupyter writes it: indent 2, keys unsorted, ASCII escapes, no final newline.
    original = json.dumps(
        {
            "nbformat": 4,
            "cells": [code(["x = 'é'\n", "y = 1"]), code(["loss.backward()"], outputs=[{"text": "ü"}])],
            "metadata": {},
            "nbformat_minor": 2,
        },
        indent=2,
    )
    notebook = Notebook.parse(original)
    fixed = notebook.updated_json(notebook.source.replace("loss.backward()", "scaler.scale(loss).backward()"))
    assert fixed == original.replace('"loss.backward()"', '"scaler.scale(loss).backward()"')


def test_compact_json_stays_compact():
    original = json.dumps({"cells": [code("a = 1\nb = 2")], "nbformat": 4}, separators=(",", ":"))
    notebook = Notebook.parse(original)
    fixed = notebook.updated_json(notebook.source.replace("b = 2", "b = 3"))
    assert fixed == original.replace("b = 2", "b = 3")


def test_list_sources_stay_lists_and_string_sources_stay_strings():
    original = nbformat_text([code(["a = 1\n", "b = 1"]), code("c = 1\nd = 1\n")])
    notebook = Notebook.parse(original)
    document = json.loads(notebook.updated_json(notebook.source.replace("= 1", "= 2")))
    assert [cell["source"] for cell in document["cells"]] == [["a = 2\n", "b = 2"], "c = 2\nd = 2\n"]


def test_line_magics_and_shell_escapes_become_placeholders_and_come_back():
    cell = [
        "%load_ext autoreload\n",
        "!pip install torch\n",
        "files = !ls\n",
        "elapsed = %time train()\n",
        "torch.autocast?\n",
        "?torch.cuda.amp\n",
        "if debug:\n",
        "    %pdb on\n",
        "loss.backward()",
    ]
    original = nbformat_text([code(cell)])
    notebook = Notebook.parse(original)
    assert notebook.source.splitlines()[1:9] == [
        "pass  # amp-lint: ipython-magic 1",
        "pass  # amp-lint: ipython-magic 2",
        "pass  # amp-lint: ipython-magic 3",
        "pass  # amp-lint: ipython-magic 4",
        "pass  # amp-lint: ipython-magic 5",
        "pass  # amp-lint: ipython-magic 6",
        "if debug:",
        "    pass  # amp-lint: ipython-magic 7",
    ]
    cst.parse_module(notebook.source)
    fixed_source = notebook.source.replace("loss.backward()", "scaler.scale(loss).backward()")
    fixed = json.loads(notebook.updated_json(fixed_source))
    assert fixed["cells"][0]["source"] == cell[:-1] + ["scaler.scale(loss).backward()"]


def test_backslash_continued_magic_is_hidden_line_by_line():
    notebook = Notebook.parse(nbformat_text([code("!pip install \\\n    torch\nx = 1\n")]))
    assert notebook.source == (
        "# amp-lint: cell 1\npass  # amp-lint: ipython-magic 1\n    # amp-lint: ipython-magic 2\nx = 1\n"
    )


def test_magic_like_lines_inside_strings_and_brackets_are_python():
    cell = 'query = """\n%s\n!important\n"""\nvalues = [\n    1,\n    2,\n]\nratio = a \\\n    % b\n'
    notebook = Notebook.parse(nbformat_text([code(cell)]))
    assert notebook.source == "# amp-lint: cell 1\n" + cell


def test_cell_magic_hides_the_whole_cell_and_keeps_its_line_count():
    original = nbformat_text([code("%%bash\necho hi\nls"), code("x = 1")])
    notebook = Notebook.parse(original)
    assert notebook.source == (
        "# amp-lint: cell 1\n"
        "# amp-lint: ipython-magic 1\n"
        "# amp-lint: ipython-magic 2\n"
        "# amp-lint: ipython-magic 3\n"
        "# amp-lint: cell 2\n"
        "x = 1\n"
    )
    assert notebook.locate(6, 1) == (2, 1, 1)
    fixed = json.loads(notebook.updated_json(notebook.source.replace("x = 1", "x = 2")))
    assert [cell["source"] for cell in fixed["cells"]] == ["%%bash\necho hi\nls", "x = 2"]


def test_imports_added_above_the_first_marker_go_to_the_first_code_cell():
    original = nbformat_text([markdown("intro"), code(["model.fit()"])])
    notebook = Notebook.parse(original)
    fixed = json.loads(notebook.updated_json("import torch\n" + notebook.source))
    assert fixed["cells"][1]["source"] == ["import torch\n", "model.fit()"]


def test_empty_notebook_and_empty_cells():
    original = nbformat_text([code([]), code("")])
    notebook = Notebook.parse(original)
    assert notebook.source == "# amp-lint: cell 1\n# amp-lint: cell 2\n"
    assert notebook.updated_json(notebook.source) == original


@pytest.mark.parametrize(
    "break_markers, problem",
    [
        (lambda source: source.replace("# amp-lint: cell 3\n", ""), "marker of cell 3 missing"),
        (lambda source: source + "# amp-lint: cell 2\n", "marker of cell 2 repeated or unknown"),
        (
            lambda source: source.replace("# amp-lint: cell 2\n", "# amp-lint: cell X\n")
            .replace("# amp-lint: cell 3\n", "# amp-lint: cell 2\n")
            .replace("# amp-lint: cell X\n", "# amp-lint: cell 3\n"),
            "markers out of order",
        ),
    ],
    ids=["missing", "duplicated", "out-of-order"],
)
def test_broken_cell_markers_refuse_the_fix(break_markers, problem):
    notebook = Notebook.parse(TRAINING)
    with pytest.raises(SourceError, match=problem):
        notebook.updated_json(break_markers(notebook.source))


def test_changed_or_dropped_magic_placeholder_refuses_the_fix():
    notebook = Notebook.parse(TRAINING)
    placeholder = "pass  # amp-lint: ipython-magic 1\n"
    with pytest.raises(SourceError, match="dropped or moved an IPython magic line in cell 2"):
        notebook.updated_json(notebook.source.replace(placeholder, ""))
    with pytest.raises(SourceError, match="changed an IPython magic line in cell 2"):
        notebook.updated_json(notebook.source.replace(placeholder, "    " + placeholder))


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"cells": [', "invalid notebook JSON: Expecting value at line 1, column 12"),
        ("[]", "not a Jupyter notebook (nbformat 4): no list of cells"),
        ('{"worksheets": []}', "not a Jupyter notebook (nbformat 4): no list of cells"),
        ('{"cells": [1]}', "invalid notebook: cell 1 is not a JSON object"),
        ('{"cells": [{"cell_type": "code", "source": [1]}]}', "invalid notebook: cell 1 has no source text"),
    ],
)
def test_invalid_notebooks_are_refused_with_one_line(text, message):
    with pytest.raises(SourceError) as caught:
        Notebook.parse(text)
    assert caught.value.message == message


cell_text = st.text(alphabet=st.sampled_from("ab %!?#'\"\\()=:\t\x0c\r\n\u2028é"), max_size=40)


@given(st.lists(st.tuples(cell_text, st.booleans()), max_size=4))
def test_any_cells_round_trip_and_a_changed_cell_comes_back(cells):
    original = nbformat_text([code(_split(text) if as_list else text) for text, as_list in cells])
    notebook = Notebook.parse(original)
    assert notebook.updated_json(notebook.source) == original
    if cells:
        changed = json.loads(notebook.updated_json(notebook.source + "x = 1\n"))
        last_text, as_list = cells[-1]
        last_source = changed["cells"][-1]["source"]
        assert ("".join(last_source) if as_list else last_source) == _with_line(last_text)


def _split(text):
    return re.findall(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+", text)


def _with_line(text):
    """A line appended to the last cell; a cell that had no final newline still has none."""
    if text.endswith(("\n", "\r")):
        return text + "x = 1\n"
    return text + ("\n" if text else "") + "x = 1"
