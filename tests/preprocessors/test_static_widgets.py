"""Does StaticWidgets show an interactive figure's picture in feedback, not the widget's repr?"""

import pytest
from nbformat.v4 import new_code_cell, new_notebook, new_output

from autograder.preprocessors import StaticWidgets

KERNEL = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
VIEW = "application/vnd.jupyter.widget-view+json"
STATE = "application/vnd.jupyter.widget-state+json"
PICTURE = {"output_type": "display_data", "metadata": {},
           "data": {"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"}}


def view(model_id):
    return new_output("display_data", data={
        "text/plain": "interactive(children=(IntSlider(value=0, description='step'), Output()))",
        VIEW: {"version_major": 2, "version_minor": 0, "model_id": model_id}})


def model(name, **state):
    return {"model_name": name, "model_module": "@jupyter-widgets/controls",
            "model_module_version": "2.0.0", "state": state}


def interact_notebook(state):
    nb = new_notebook(cells=[new_code_cell("show_ring(g)", outputs=[view("box")])])
    if state is not None:
        nb.metadata["widgets"] = {STATE: {"version_major": 2, "version_minor": 0,
                                          "state": state}}
    return nb


def test_the_picture_replaces_the_widget():
    """Does an interact VBox become its Output widget's picture and a note with the slider?"""
    nb = interact_notebook({
        "box": model("VBoxModel", children=["IPY_MODEL_slider", "IPY_MODEL_out"]),
        "slider": model("IntSliderModel", description="step", value=0),
        "out": model("OutputModel", outputs=[PICTURE]),
    })
    nb, _ = StaticWidgets().preprocess(nb, {})
    picture, note = nb.cells[0].outputs
    assert picture.data["image/png"] == "iVBORw0KGgo="
    assert note.output_type == "stream" and "interactive in the notebook" in note.text
    assert "step = 0" in note.text


def test_a_dropdown_is_named_by_its_label():
    """A Dropdown syncs an index, not a value: does the note show the option's label?"""
    nb = interact_notebook({
        "box": model("VBoxModel", children=["IPY_MODEL_tp", "IPY_MODEL_out"]),
        "tp": model("DropdownModel", description="TP", index=1, _options_labels=["1", "2"]),
        "out": model("OutputModel", outputs=[PICTURE]),
    })
    nb, _ = StaticWidgets().preprocess(nb, {})
    assert "TP = 2" in nb.cells[0].outputs[-1].text


@pytest.mark.parametrize("state", [None, {"box": model("VBoxModel", children=[])}],
                         ids=["no widget state", "no Output widget"])
def test_without_a_picture_a_short_note_replaces_the_repr(state):
    """With no state, or no Output widget in it, is the repr replaced by one short line?"""
    nb, _ = StaticWidgets().preprocess(interact_notebook(state), {})
    (output,) = nb.cells[0].outputs
    assert output.data == {"text/plain": "[A widget: run this cell in the notebook to see it.]"}


def test_a_widget_without_a_picture_names_its_controls():
    """A progress bar (no Output widget): does its line say where it ended?"""
    nb = interact_notebook({
        "box": model("HBoxModel", children=["IPY_MODEL_bar"]),
        "bar": model("IntProgressModel", description="measuring", value=39, max=39),
    })
    nb, _ = StaticWidgets().preprocess(nb, {})
    assert "see it (measuring = 39)." in nb.cells[0].outputs[0].data["text/plain"]


def test_children_that_loop_do_not_hang():
    """A model listed as its own child: is it visited once?"""
    nb = interact_notebook({"box": model("VBoxModel", children=["IPY_MODEL_box"])})
    nb, _ = StaticWidgets().preprocess(nb, {})
    assert len(nb.cells[0].outputs) == 1


def test_a_real_interact_shows_its_picture():
    """Executed by nbclient (as autograding does): is the picture there, the repr gone?"""
    from nbclient import NotebookClient

    source = ("import ipywidgets as w, matplotlib.pyplot as plt\n"
              "def draw(k=1):\n    plt.plot([0, k]); plt.show()\n"
              "w.interact(draw, k=w.IntSlider(value=1, min=0, max=3));")
    nb = new_notebook(cells=[new_code_cell(source)], metadata=KERNEL)
    NotebookClient(nb, timeout=60, kernel_name="python3").execute()
    nb, _ = StaticWidgets().preprocess(nb, {})
    outputs = nb.cells[0].outputs
    assert any("image/png" in o.get("data", {}) for o in outputs)
    assert not any(VIEW in o.get("data", {}) for o in outputs)
    assert "k = 1" in outputs[-1].text
