{
  "payloadType": "application/vnd.in-toto+json",
  "payload": "eyJfdHlwZSI6Imh0dHBzOi8vaW4tdG90by5pby9TdGF0ZW1lbnQvdjEiLCJwcmVkaWNhdGUiOnsia2l0IjoibWFuaWZlc3QifSwicHJlZGljYXRlVHlwZSI6InVybjpraXQ6bWFuaWZlc3QtYXBwcm92YWw6MSIsInN1YmplY3QiOlt7ImRpZ2VzdCI6eyJzaGEyNTYiOiI1NTI3M2JjOWU4ZjhlNmM5OTg2ZTI5OGUxNGYzYjY3ZjdmYzFhNmJkMzUzNTYyNTU1NzdlYTc4M2Q4ZDA1YTkyIn0sIm5hbWUiOiJ3b3JrbG9hZC1zaGFyZWQtcHJlZml4LnlhbWwifV19",
  "signatures": [
    {
      "keyid": "SHA256:+7JblY1FdA9i3H5v5xHFp5RlvuS2IFBmP4Kwmrl738s",
      "sig": "AcdVismtmrkJDVy0/bL1bikzbRoEHQEkt2qAcKGzNEYdGxEHNdh73Cv+f1iqE/5ezXbx7blErXCHdgzc9tFjAA==",
      "publicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE3lKu2Eaqir5Wi+R44pDwEuDfFJHlGGFKEXqIYwyP52 kit-example"
    }
  ]
}
