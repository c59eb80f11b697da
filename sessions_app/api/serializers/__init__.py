"""The session API's door: input serializers (bodies and query strings, validated once, here)
and output serializers (the contract's JSON shapes, declared for the OpenAPI schema), one
module per resource group, on the building blocks of ``api.serializers``
(and ``fields``, the two that follow this app's rules).

The JSON itself is produced by ``sessions_app.selectors`` (``session_data``, ``message_data``,
``part_data``…), which the events share; the output serializers here name the same fields, and
``tests/test_schema.py`` checks that the two agree."""
