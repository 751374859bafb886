"""The local web app (`kernelmap serve`): pages over the library's answers,
drawn by the same templates and viewer as the HTML report. See `app.py`."""
