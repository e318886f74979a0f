# DiLoCo numerics: codecs, flat parameters, outer optimizer, aggregation.
crowdtrain_test(tst_diloco SOURCES tst_diloco.cpp LIBS crowdtrain::diloco)
