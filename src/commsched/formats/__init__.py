"""The interchange formats on disk: profiles, plans and clusters as JSON (:mod:`commsched.formats.io`),
each with a JSON Schema in ``schemas/``. ``validate.json`` has its own loader,
:func:`commsched.calibrate.report.load_validate_report`."""
