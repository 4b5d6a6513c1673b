"""The dashboard's screens: the main screen (``main``), what its keys do (``flows``), the dialogs (``dialogs``)."""
