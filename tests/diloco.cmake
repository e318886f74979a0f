# DiLoCo numerics: codecs, flat parameters, outer optimizer, aggregation.
crowdtrain_test(tst_diloco SOURCES tst_diloco.cpp LIBS crowdtrain::diloco)
# The sparse codec, including an independent Python decoder written from
# docs/protocol.md (tests/sparse_reference.py); the reference check also
# runs on its own, under its own name.
crowdtrain_test(tst_diloco_sparse SOURCES tst_diloco_sparse.cpp LIBS crowdtrain::diloco)
add_test(NAME sparse_reference_decoder COMMAND tst_diloco_sparse pythonReferenceDecoder)
set_tests_properties(sparse_reference_decoder PROPERTIES ENVIRONMENT "QT_QPA_PLATFORM=offscreen;OMP_NUM_THREADS=2")
